"""Price data: dated catalogs bundled with corral (``pricing/data/``) and their loader."""

from corral.pricing.catalog import (
    Catalog,
    CatalogEntry,
    CatalogError,
    catalog_files,
    load_catalog,
    read_catalog,
)

__all__ = [
    "Catalog",
    "CatalogEntry",
    "CatalogError",
    "catalog_files",
    "load_catalog",
    "read_catalog",
]
