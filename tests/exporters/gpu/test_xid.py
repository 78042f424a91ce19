"""XID events name their GPU by handle, so a GPU that just fell off the bus still gets its count."""

from __future__ import annotations

import pynvml

from governor.exporters.gpu.fake import Handle
from governor.exporters.gpu.xid import handle_key


def test_pynvml_handles_are_keyed_by_address() -> None:
    first, second = pynvml.struct_c_nvmlDevice_t(), pynvml.struct_c_nvmlDevice_t()
    a = pynvml.c_nvmlDevice_t(first)
    a_again = pynvml.c_nvmlDevice_t(first)
    b = pynvml.c_nvmlDevice_t(second)
    assert handle_key(a) == handle_key(a_again)
    assert handle_key(a) != handle_key(b)
    assert {handle_key(a): 0}[handle_key(a_again)] == 0


def test_other_handles_are_their_own_key() -> None:
    assert handle_key(Handle(3)) == Handle(3)
    assert handle_key(Handle(3)) != handle_key(Handle(4))
