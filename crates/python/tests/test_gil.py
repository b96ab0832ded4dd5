"""Calls that wait on the network release the GIL: another Python thread
runs while one is in flight."""

import sys
import threading
import time

from conftest import pattern_bytes

MIB = 1 << 20


def counting_while(call):
    """How far a counting thread got while `call()` ran in this thread.

    The switch interval is made so long that this thread never hands the
    GIL over between bytecodes: the counter can only move while `call()`
    itself has released the GIL. The counter sleeps between counts (which
    releases the GIL) so this thread gets it back when the call returns."""
    count = 0
    stop = threading.Event()
    running = threading.Event()

    def counter():
        nonlocal count
        running.set()
        while not stop.is_set():
            count += 1
            time.sleep(0.0001)

    # The interval is set before the counter starts: a thread that began
    # waiting for the GIL under the old 5 ms interval would still ask this
    # thread to drop it 5 ms later, in the middle of `call()`.
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    thread = threading.Thread(target=counter)
    try:
        thread.start()
        running.wait()
        before = count
        result = call()
        after = count
    finally:
        sys.setswitchinterval(old_interval)
        stop.set()
        thread.join()
    return after - before, result


def test_another_thread_runs_while_a_large_get_waits(client, bucket):
    data = pattern_bytes(32 * MIB, seed=31)
    advanced, info = counting_while(lambda: client.put(bucket, "big", data))
    assert info.size == len(data)
    assert advanced > 0, "the counting thread never ran during put"
    advanced, got = counting_while(lambda: client.get(bucket, "big"))
    assert got == data
    assert advanced > 0, "the counting thread never ran during get"


def test_another_thread_runs_while_a_command_runs(client, bucket):
    client.put(bucket, "text", pattern_bytes(16 * MIB, seed=37))
    advanced, result = counting_while(lambda: client.wc(f"{bucket}/text"))
    assert result["results"][0]["size_bytes"] == 16 * MIB
    assert advanced > 0, "the counting thread never ran during wc"


def test_a_control_call_that_holds_the_gil_lets_no_count_through(client):
    # The harness itself can fail: a call that never releases the GIL
    # (pure Python work) leaves the counter where it was.
    def busy():
        total = 0
        for i in range(2_000_000):
            total += i
        return total

    advanced, _ = counting_while(busy)
    assert advanced == 0
