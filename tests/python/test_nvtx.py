"""torch.cuda.nvtx's functions."""

import pytest

import gpumux


def test_ranges_nest(daemon):
    assert gpumux.nvtx.range_push("outer") == 0
    assert gpumux.nvtx.range_push("inner") == 1
    assert gpumux.nvtx.range_pop() == 1
    assert gpumux.nvtx.range_pop() == 0
    gpumux.nvtx.mark("here")
    with gpumux.nvtx.range("step {}", 3):
        assert gpumux.nvtx.range_push("nested") == 1
        gpumux.nvtx.range_pop()


def test_pop_without_push(daemon):
    with pytest.raises(gpumux.GpumuxError):
        gpumux.nvtx.range_pop()
