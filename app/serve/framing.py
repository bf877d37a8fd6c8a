"""Broken HTTP framing answered in the documented JSON error shape.

A request whose framing h11 cannot read (`Content-Length: abc`, `-5`, two different lengths, a
bad request line) never reaches the ASGI app: uvicorn's h11 protocol answers it itself, with a
plain-text 400. This protocol is uvicorn's h11 one with that answer in the shape every other
refusal has (`{"error": {"message", "type", "code"}}`), so a client reads one kind of error.
uvicorn takes a protocol class as `http=`; send_400_response is the one method changed.
"""
from __future__ import annotations

import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from .common import error_body

FRAMING_MESSAGE = "the request's HTTP framing is broken (its request line, headers or Content-Length); the server could not read it"


class JSONFramingProtocol(H11Protocol):
    def send_400_response(self, msg: str) -> None:
        body = json.dumps(error_body(400, FRAMING_MESSAGE)).encode("utf-8")
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), (b"connection", b"close")]
        for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        self.transport.close()
