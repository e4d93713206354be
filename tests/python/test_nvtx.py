"""torch.cuda.nvtx's functions."""

import threading

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


def test_ranges_nest_per_thread(daemon):
    """torch.cuda.nvtx's ranges are thread-local: each thread has its depth."""
    assert gpumux.nvtx.range_push("main") == 0
    seen = []

    def other():
        seen.append(gpumux.nvtx.range_push("other"))
        seen.append(gpumux.nvtx.range_push("other inner"))
        seen.append(gpumux.nvtx.range_pop())
        seen.append(gpumux.nvtx.range_pop())

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert seen == [0, 1, 1, 0]
    assert gpumux.nvtx.range_push("main inner") == 1
    assert gpumux.nvtx.range_pop() == 1
    assert gpumux.nvtx.range_pop() == 0
