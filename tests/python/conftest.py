"""pytest setup for the binding's tests: the package is imported from the checkout
(python/), the shared test data from $TL_SHARED (default ../shared), and, when $TL_TAP_OUT
names a file, every test's outcome is written there as a TAP line ("ok N - name" / "not ok N -
name") with the plan, so tests/run.sh counts pytest's tests like every other test program."""

import os
import re
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))


def shared(rel):
    base = os.environ.get("TL_SHARED") or os.path.join(ROOT, "..", "shared")
    return os.path.join(base, rel)


@pytest.fixture(scope="session")
def model_path():
    path = shared("models/stories260K.gguf")
    assert os.path.exists(path), "shared test data missing: " + path
    return path


@pytest.fixture(scope="session")
def model(model_path):
    import tokenloom

    m = tokenloom.Model(model_path)
    yield m


@pytest.fixture(scope="session")
def reference():
    """The greedy continuation of "Once upon a time" in ../shared/models/PROVENANCE.md (text and
    token ids, from llama2.c and llama.cpp)."""
    text = open(shared("models/PROVENANCE.md"), encoding="utf-8").read()
    body = text.split("## Reference output", 1)[1]
    full = re.findall(r"```\n(.*?)\n```", body, re.S)[0]
    ids = [int(x) for x in re.search(r"all_ids \[([^\]]*)\]", body).group(1).split(",")]
    prompt_ids = [int(x) for x in re.search(r"prompt_ids \[([^\]]*)\]", body).group(1).split(",")]
    assert full.startswith("Once upon a time")
    return {"text": full[len("Once upon a time"):], "ids": ids, "prompt_ids": prompt_ids}


class _Tap:
    def __init__(self, path):
        self.f = open(path, "w")
        self.n = 0
        self.failed = set()

    def pytest_collection_finish(self, session):
        self.f.write("1..%d\n" % len(session.items))
        self.f.flush()

    def pytest_runtest_logreport(self, report):
        name = report.nodeid.split("::", 1)[-1]
        if report.when == "call" or (report.when == "setup" and not report.passed):
            self.n += 1
            if report.passed:
                self.f.write("ok %d - %s\n" % (self.n, name))
            elif report.skipped:
                self.f.write("ok %d - %s # SKIP\n" % (self.n, name))
            else:
                self.failed.add(report.nodeid)
                self.f.write("not ok %d - %s\n" % (self.n, name))
        elif report.when == "teardown" and report.failed and report.nodeid not in self.failed:
            self.n += 1
            self.f.write("not ok %d - %s (teardown)\n" % (self.n, name))
        self.f.flush()


def pytest_configure(config):
    path = os.environ.get("TL_TAP_OUT")
    if path:
        config.pluginmanager.register(_Tap(path), "tl_tap")
