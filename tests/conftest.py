import pytest

from tests.support.apiserver import start_apiserver


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory):
    """One real apiserver (SQLite) shared by the API tests; tests use their own namespaces."""
    server = start_apiserver(tmp_path_factory.mktemp("apiserver"))
    yield server
    server.stop()


@pytest.fixture
def fresh_apiserver(tmp_path):
    """A private apiserver for tests that restart it, compact it or count everything in it."""
    servers = []

    def start(*extra, data_dir=None, port=0):
        server = start_apiserver(data_dir or tmp_path / "data", *extra, port=port)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
