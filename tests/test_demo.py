"""`make demo` runs `python -m pymc_dp demo`: its quick mode must run and write the plot."""

from __future__ import annotations

import os

import pytest

from pymc_dp.__main__ import main


@pytest.mark.slow
def test_demo_quick_runs_and_saves_plot(tmp_path, capsys):
    main(["demo", "--quick", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert (tmp_path / "comparison.png").stat().st_size > 10_000
    assert "epsilon" in out and "NUTS" in out  # the privacy report and the comparison


def test_cli_requires_a_command():
    with pytest.raises(SystemExit):
        main([])


def test_single_threaded_blas_restores_only_its_own_names(monkeypatch):
    """The three BLAS variables are set to 1 inside and restored (or removed) after; what the
    caller sets inside the block stays."""
    from pymc_dp.demo import single_threaded_blas

    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    monkeypatch.delenv("PYMC_DP_TEST_CALLER", raising=False)
    with single_threaded_blas():
        assert os.environ["OMP_NUM_THREADS"] == os.environ["MKL_NUM_THREADS"] == "1"
        monkeypatch.setenv("PYMC_DP_TEST_CALLER", "x")
    assert os.environ["OMP_NUM_THREADS"] == "7"
    assert "MKL_NUM_THREADS" not in os.environ
    assert os.environ["PYMC_DP_TEST_CALLER"] == "x"
