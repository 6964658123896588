"""The `--metrics-bind` page counts a scrape only once its page reached a scraper still waiting for it: the run's end
waits for one more such scrape (soak/run/metrics.py), so a request a timed-out scraper left queued while soak was
busy must not count, or the final verdicts and soak_run_finished 1 are never stored."""

from __future__ import annotations

import socket
import time
import urllib.request

from soak.metrics.prometheus import MetricsEndpoint, still_waiting

REQUEST = b"GET /metrics HTTP/1.1\r\nHost: soak\r\n\r\n"


def accepted_pair() -> tuple[socket.socket, socket.socket]:
    """(client, server side) of one loopback TCP connection."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    return client, server


def test_a_client_that_sent_its_request_and_waits_is_waiting():
    client, server = accepted_pair()
    with client, server:
        client.sendall(REQUEST)
        assert server.recv(len(REQUEST)) == REQUEST  # the server read the request, as the handler does
        assert still_waiting(server)


def test_a_client_that_gave_up_and_closed_is_not():
    client, server = accepted_pair()
    with server:
        client.sendall(REQUEST)
        client.close()  # a scraper's timeout passed before the busy page answered
        assert server.recv(len(REQUEST)) == REQUEST
        assert not still_waiting(server)


def test_a_page_read_whole_counts_once():
    endpoint = MetricsEndpoint("127.0.0.1", 0)
    try:
        assert endpoint.scrapes == 0
        with urllib.request.urlopen(endpoint.url, timeout=10) as answer:
            assert answer.status == 200
            answer.read()
        deadline = time.monotonic() + 10  # the server counts once its write returned: maybe just after our read
        while endpoint.scrapes == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert endpoint.scrapes == 1
    finally:
        endpoint.close()
