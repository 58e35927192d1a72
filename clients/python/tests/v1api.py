"""moat's /v1 API without the client (urllib), for the tests that check
an effect independently of the code under test."""

from __future__ import annotations

import urllib.error
import urllib.request


def api(url, method, path, body=None, token=None):
    """(status, body bytes) of one request; an HTTP error is an answer too."""
    req = urllib.request.Request(url + path, data=body, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
