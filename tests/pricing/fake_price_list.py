"""A fake AWS Price List API (``pricing``) on 127.0.0.1, for boto3 pointed at it with
``endpoint_url``: the JSON 1.1 protocol (``POST /``, ``X-Amz-Target:
AWSPriceListService.GetProducts``), ``TERM_MATCH`` filters on product attributes, pages of
``MaxResults`` (default :attr:`FakePriceList.page_size`) with ``NextToken``, and each price as
the JSON *string* AWS sends (``product.attributes``, ``terms.OnDemand``). Errors are
``{"__type", "message"}`` with HTTP 400. moto has no ``pricing`` service.

The published contract is botocore's service model of ``pricing``: every request body is
checked against the operation's input shape (botocore's ``ParamValidator``; a violation is a
``ValidationException`` and is kept in :attr:`FakePriceList.violations`), and every answer
against its output shape before it is sent. What the model does not say (the attributes of
an EC2 product, the shape of its terms) follows the Price List API's documentation; see
docs/providers.md, "Assumptions no published contract settles"."""

from __future__ import annotations

import json
import threading
import uuid
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from botocore.model import ServiceModel, Shape
from botocore.session import get_session
from botocore.validate import ParamValidator


@cache
def _model() -> ServiceModel:
    return get_session().get_service_model("pricing")


def _validate(value: dict[str, Any], shape: Shape | None) -> str:
    """botocore's report of what in ``value`` its model of ``shape`` forbids ("" if nothing)."""
    if shape is None:
        return ""
    report = ParamValidator().validate(value, shape)
    return report.generate_report() if report.has_errors() else ""


def product(
    instance_type: str,
    region: str,
    usd: float | None,
    *,
    vcpu: int,
    memory: str,
    gpu: str = "0",
    gpu_memory: str = "NA",
    os_: str = "Linux",
    capacity: str = "Used",
    family: str | None = None,
) -> dict[str, Any]:
    """One Price List product as AWS writes it (``usd`` None: no on-demand term)."""
    sku = uuid.uuid4().hex[:16].upper()
    attrs = {
        "instanceType": instance_type,
        "regionCode": region,
        "location": region,
        "vcpu": str(vcpu),
        "memory": memory,
        "gpu": gpu,
        "gpuMemory": gpu_memory,
        "operatingSystem": os_,
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": capacity,
        "licenseModel": "No License required",
        "servicecode": "AmazonEC2",
        "instanceFamily": family or ("General purpose" if gpu in ("0", "") else "GPU instance"),
    }
    terms: dict[str, Any] = {}
    if usd is not None:
        code = f"{sku}.JRTCKXETXF"
        terms["OnDemand"] = {
            code: {
                "offerTermCode": "JRTCKXETXF",
                "sku": sku,
                "priceDimensions": {
                    f"{code}.6YS6EN2CT7": {
                        "unit": "Hrs",
                        "pricePerUnit": {"USD": f"{usd:.10f}"},
                        "description": f"${usd} per On Demand Linux {instance_type} Instance Hour",
                    }
                },
            }
        }
    return {
        "product": {"productFamily": "Compute Instance", "sku": sku, "attributes": attrs},
        "serviceCode": "AmazonEC2",
        "terms": terms,
        "version": "20250601000000",
        "publicationDate": "2025-06-01T00:00:00Z",
    }


class FakePriceList:
    def __init__(self, products: list[dict[str, Any]], page_size: int = 2):
        self.products = products
        self.page_size = page_size
        self.requests: list[dict[str, Any]] = []
        self.violations: list[str] = []
        handler = type("Handler", (_Handler,), {"fake": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def exchange(self, target: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The answer to one request, both checked against botocore's model of the API."""
        op = target.rpartition(".")[2]
        model = _model()
        if target.partition(".")[0] != "AWSPriceListService" or op not in model.operation_names:
            return 400, {"__type": "UnknownOperationException", "message": target}
        shape = model.operation_model(op)
        problems = _validate(body, shape.input_shape)
        if problems:
            self.violations.append(f"request {op}: {problems}")
            return 400, {"__type": "ValidationException", "message": problems}
        status, answer = self.answer(target, body)
        if status == 200:
            problems = _validate(answer, shape.output_shape)
            if problems:
                self.violations.append(f"answer {op}: {problems}")
        return status, answer

    def assert_clean(self) -> None:
        assert not self.violations, self.violations

    def answer(self, target: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.requests.append({"target": target, **body})
        if target != "AWSPriceListService.GetProducts":
            return 400, {"__type": "UnknownOperationException", "message": target}
        if body.get("ServiceCode") != "AmazonEC2":
            return 400, {"__type": "InvalidParameterException", "message": "unknown ServiceCode"}
        wanted = {}
        for f in body.get("Filters") or []:
            if f.get("Type") != "TERM_MATCH":
                return 400, {"__type": "InvalidParameterException", "message": "bad filter"}
            wanted[f["Field"]] = f["Value"]
        found = [
            p
            for p in self.products
            if all(p["product"]["attributes"].get(k) == v for k, v in wanted.items())
        ]
        start = int(body.get("NextToken") or 0)
        size = int(body.get("MaxResults") or self.page_size)
        page = found[start : start + size]
        out: dict[str, Any] = {
            "FormatVersion": "aws_v1",
            "PriceList": [json.dumps(p) for p in page],
        }
        if start + size < len(found):
            out["NextToken"] = str(start + size)
        return 200, out


class _Handler(BaseHTTPRequestHandler):
    fake: FakePriceList

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        status, answer = self.fake.exchange(self.headers.get("X-Amz-Target", ""), body)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass
