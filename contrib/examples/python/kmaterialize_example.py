#!/usr/bin/env python3
"""The daemon's API from Python over its unix socket, standard library only.

Lists the tables, gets a key and reads a table's rows page by page
(Kmaterialize-More says whether a page follows; after= is the last key of
the page before; generation= pins later pages to the first page's).

Usage: kmaterialize_example.py SOCKET TABLE KEY
  $ python3 contrib/examples/python/kmaterialize_example.py /var/lib/kmaterialize/tables.db.sock balances alice
"""

import http.client
import json
import socket
import sys
import urllib.parse


class UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTPConnection to a unix socket: the host name is only a name."""

    def __init__(self, path, timeout=60):
        super().__init__("kmaterialize", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


class APIError(Exception):
    """An error answer: {"error": ..., "code": ...} (the OpenAPI document's Error)."""

    def __init__(self, status, body):
        try:
            e = json.loads(body)
            msg, self.code = e["error"], e["code"]
        except (ValueError, KeyError):
            msg, self.code = body.decode("utf-8", "replace"), None
        super().__init__(f"{status} {self.code}: {msg}")
        self.status = status


def request(conn, method, path, query=None):
    if query:
        path += "?" + urllib.parse.urlencode(query)
    conn.request(method, path)
    resp = conn.getresponse()
    body = resp.read()
    if resp.status >= 300:
        raise APIError(resp.status, body)
    return resp, body


def rows(conn, table, page_size=3):
    """Yields (key, value) of every row, in key order, page by page."""
    query = {"limit": page_size}
    while True:
        resp, body = request(conn, "GET", f"/v1/tables/{urllib.parse.quote(table, safe='')}/rows", query)
        # application/x-ndjson: one JSON object per line.
        last = None
        for line in body.decode("utf-8").splitlines():
            row = json.loads(line)
            last = row["key"]
            yield row["key"], row["value"]
        if resp.getheader("Kmaterialize-More") != "true":
            return
        query["generation"] = resp.getheader("Kmaterialize-Generation")
        query["after"] = last


def main():
    sock, table, key = sys.argv[1:4]
    conn = UnixHTTPConnection(sock)
    _, body = request(conn, "GET", "/v1/tables")
    for t in json.loads(body)["tables"]:
        print(f"table {t['name']} {t['state']}")
    try:
        _, value = request(conn, "GET", f"/v1/tables/{urllib.parse.quote(table, safe='')}/keys/{urllib.parse.quote(key, safe='')}")
        print(f"get {key} {value.decode('utf-8')}")
    except APIError as e:
        if e.code != "key_not_found":
            raise
        print(f"get {key} not found")
    for k, v in rows(conn, table):
        print(f"row {k}\t{v}")
    conn.close()


if __name__ == "__main__":
    main()
