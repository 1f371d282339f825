"""``corral download RUN [PATH...] [-o DIR]``: a run's results archive, or the artifacts the
paths name, checked against the run's manifest (:mod:`corral.service.download`)."""

from __future__ import annotations

import typer


def download(
    run_ref: str = typer.Argument(..., metavar="RUN", help="Run id, id prefix or name."),
    paths: list[str] = typer.Argument(
        None,
        metavar="[PATH...]",
        help="Artifacts to fetch (files or directories, as the manifest names them). "
        "Default: the results archive.",
    ),
    out: str = typer.Option(".", "--output", "-o", help="Directory to write into."),
    force: bool = typer.Option(False, "--force", help="Replace files that differ."),
    json_: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
) -> None:
    """Download a run's results: the archive of its artifacts and manifest
    (`<DIR>/<run>-results.tar.gz`), or the artifacts PATH names under DIR. From the run's
    machine while it has one, else from its artifacts.storage; every file is checked against
    the manifest (sha256). Audited in the run's events."""
    import sys

    from corral.cli.output import console, print_json
    from corral.service.download import download_artifacts

    def shown(path: str, size: int) -> None:
        if not json_:
            console.print(f"  {path} ({size:,} bytes)")

    bar = _Bar() if not json_ and sys.stderr.isatty() else None
    try:
        done = download_artifacts(
            run_ref,
            list(paths or []),
            dest=out,
            force=force,
            on_file=shown,
            on_progress=bar.update if bar else (lambda _done, _total: None),
        )
    finally:
        if bar is not None:
            bar.close()
    if json_:
        print_json(done)
        return
    what = done.archive or f"{len(done.files)} file(s) under {done.directory}"
    console.print(f"downloaded {what} from the {done.source} ({done.bytes:,} bytes checked)")


class _Bar:
    """A transient bytes progress bar on stderr (a terminal only)."""

    def __init__(self) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TransferSpeedColumn,
        )

        from corral.cli.output import err_console

        self.progress = Progress(
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            console=err_console._get(),
            transient=True,
        )
        self.task = self.progress.add_task("download", total=None)
        self.progress.start()

    def update(self, done: int, total: int | None) -> None:
        self.progress.update(self.task, completed=done, total=total)

    def close(self) -> None:
        self.progress.stop()
