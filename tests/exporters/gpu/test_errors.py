"""Errors are counted every time and logged once per kind and place."""

from __future__ import annotations

import logging

import pytest

from governor.contracts.metrics import gpu as m
from governor.exporters.gpu.errors import ErrorLedger


def test_counts_start_at_zero_for_every_kind() -> None:
    assert dict(ErrorLedger().counts()) == dict.fromkeys(m.ERROR_KINDS, 0)


def test_each_error_is_counted_but_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    ledger = ErrorLedger()
    with caplog.at_level(logging.WARNING):
        for _ in range(100):
            ledger.record(m.KIND_NO_PERMISSION, "gpu 0 power", "Insufficient Permissions")
        ledger.record(m.KIND_NO_PERMISSION, "gpu 1 power", "Insufficient Permissions")
    assert dict(ledger.counts())[m.KIND_NO_PERMISSION] == 101
    assert len(caplog.records) == 2
    assert "gpu 0 power" in caplog.records[0].getMessage()


def test_forgetting_lets_the_next_one_be_logged(caplog: pytest.LogCaptureFixture) -> None:
    ledger = ErrorLedger()
    with caplog.at_level(logging.WARNING):
        ledger.record(m.KIND_GPU_LOST, "gpu 0", "GPU is lost")
        ledger.forget(m.KIND_GPU_LOST, "gpu 0")
        ledger.record(m.KIND_GPU_LOST, "gpu 0", "GPU is lost")
    assert len(caplog.records) == 2
