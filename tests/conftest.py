import pytest

import engine


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
