"""Admission, pure: who runs, who waits, who is turned away, and why — no clock, no I/O, no server.

:mod:`.policy` ranks requests by class (priorities, per-class limits, a bounded queue);
:mod:`.deadline` refuses or sheds a request that can no longer meet its class's first-token
target. ``governor serve``'s asyncio queue, the controller benchmark's virtual time and the gate
in front of stock ``vllm serve`` drive the same objects, so each admits as the others would. It
sits below the servers (it imports only the SLO spec and the contracts) for that reason.
"""
