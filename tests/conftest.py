import pytest

from kubesvc.client.rest import DEFAULT_FIELD_MANAGER
from tests.support.apiserver import running_apiserver, start_apiserver
from tests.support import filetimes, netns, rewritecache
from tests.support.up import scheduling_scope
from tests.support.cluster import api_client, temporary_namespace


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory):
    """One real apiserver (SQLite) shared by the API tests; tests use their own namespaces."""
    with running_apiserver(tmp_path_factory.mktemp("apiserver")) as server:
        yield server


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


@pytest.fixture
async def client(apiserver):
    """A RestClient (with RestClient's own default field manager) on the shared apiserver."""
    async with api_client(apiserver, DEFAULT_FIELD_MANAGER) as c:
        yield c


@pytest.fixture
async def namespace(client):
    """A namespace of the test's own on the shared apiserver, deleted after the test."""
    async with temporary_namespace(client) as name:
        yield name


def pytest_configure(config):
    """Under xdist, the controller rewrites the test files' asserts once for both workers
    (tests/support/rewritecache.py): with PYTHONDONTWRITEBYTECODE (CI) each worker did it again."""
    if not hasattr(config, "workerinput") and config.getoption("dist", "no") != "no" and config.getoption("numprocesses", None):
        rewritecache.prewrite(config, config.rootpath / "tests")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with one change: the modules sharing one ``kubesvc up``
    (tests/support/up.py SHARED_UP_MODULES) are one unit, so one worker runs them one after the
    other and their machine is started and torn down once."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedUpLoadFileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scheduling_scope(nodeid)

    return SharedUpLoadFileScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """The longest files first (tests/support/filetimes.py, from tests/file_times.json): under
    scripts/test.sh's ``--dist loadfile --no-loadscope-reorder`` a worker takes files in this
    order, so the short ones fill the tail instead of a long kernel module starting last."""
    items[:] = filetimes.longest_first(items, filetimes.load_times())


# Kernel tests are the ones marked ``kernel`` (module-level ``pytestmark = pytest.mark.kernel``):
# they program the real kernel in namespaces they create (tests/support/netns.py). They never
# skip: a machine that cannot run them fails them (pytest_runtest_setup), and a run in which
# one was skipped anyway fails (pytest_sessionfinish). The harness refuses to make a namespace
# for a test without the marker, so the marker cannot be forgotten.


def is_kernel_test(item) -> bool:
    return item.get_closest_marker("kernel") is not None


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures are set up: they may make namespaces
def pytest_runtest_setup(item):
    kernel = is_kernel_test(item)
    netns.current_test_is_kernel(kernel)
    if kernel and (problems := netns.missing_prerequisites()):
        pytest.fail("kernel tests cannot run on this machine: " + "; ".join(problems), pytrace=False)


def skipped_kernel(report, rootpath) -> bool:
    """Whether a skip report is a kernel test's; a module skipped while being collected has no
    markers to read, so its text is asked whether it marks itself ``kernel``."""
    if "kernel" in getattr(report, "keywords", {}):
        return True
    path = rootpath / report.nodeid.split("::")[0]
    return getattr(report, "when", "collect") == "collect" and path.suffix == ".py" and path.is_file() and "pytest.mark.kernel" in path.read_text()


def pytest_sessionfinish(session, exitstatus):
    """A skipped kernel test is a failure: CI must prove the data plane on the real kernel."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    kernel = [r.nodeid for r in skipped if skipped_kernel(r, session.config.rootpath)]
    if kernel:
        reporter.write_line(f"ERROR: {len(kernel)} kernel test(s) were skipped, e.g. {kernel[0]}", red=True)
        session.exitstatus = 1
