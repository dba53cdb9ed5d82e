import pytest

import engine
from engine import store


@pytest.fixture(autouse=True, scope="session")
def _cache_alone(tmp_path_factory):
    """Every test sees the user's cache alone, not the files the package was built with
    (engine/_built, engine/_build_hook.py), here and in the processes it starts: the tests of
    the cache count what it builds and writes.  tests/test_cache.py and tests/test_wheel.py
    test the built files themselves."""
    folder = tmp_path_factory.getbasetemp() / "no-built-files"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEMFORM_BUILT", str(folder))
        mp.setattr(store, "BUILT", folder)
        yield


@pytest.fixture(scope="session")
def lib():
    """The shipped formula library, loaded once (treat as read-only)."""
    return engine.load()


TINY = '''
dtype bf16 = 2 B "bfloat16"
input n : count >= 1 = 1 "things"
input width : count >= 1 "width"
option kind in {small, big} = small "kind"
rule per_thing : bytes = match kind { small => bf16, big => 2 * bf16 } "bytes per thing"
rule total : bytes = n * width * per_thing "all the bytes"
'''


@pytest.fixture
def tiny():
    """A ten-line library, independent of formulas/ (pint's _TINY)."""
    lib = engine.Library()
    lib.add_text(TINY, "tiny.mem")
    return lib.resolve()


def squaring_chain(start: str, levels: int) -> str:
    """A rule file the fuzzer found hard: fz_sq0 = start * 2, each next rule the previous one
    squared plus one, and `overhead` the last of them in bytes."""
    lines = [f'rule fz_sq0 : count = {start} * 2 "fz"']
    lines += [f'rule fz_sq{i} : count = fz_sq{i - 1} * fz_sq{i - 1} + 1 "fz"' for i in range(1, levels)]
    lines += [f'override rule overhead : bytes = fz_sq{levels - 1} * 1 B "fz"']
    return "\n".join(lines) + "\n"
