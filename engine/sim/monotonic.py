"""The monotonic clock, readable inside compiled code (Numba has no ``time`` module).

``monotonic_ns_nb()`` calls the C library's ``clock_gettime(CLOCK_MONOTONIC)`` directly, the clock behind
Python's ``time.monotonic_ns()``, so a deadline computed in Python can be checked inside the compiled
loop. The call is resolved by name when the code is linked, so the function caches on disk like any
other. POSIX only (Linux, macOS), with the 64-bit ``struct timespec`` of 64-bit systems.
"""

from __future__ import annotations

import time

from llvmlite import ir
from numba import config, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

_NS_PER_S = 1_000_000_000


@intrinsic
def _clock_gettime_ns(typingctx):
    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        timespec = ir.LiteralStructType([i64, i64])  # tv_sec, tv_nsec
        slot = cgutils.alloca_once(builder, timespec)
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32), timespec.as_pointer()])
        clock_gettime = cgutils.get_or_insert_function(builder.module, fnty, "clock_gettime")
        builder.call(clock_gettime, [ir.Constant(ir.IntType(32), time.CLOCK_MONOTONIC), slot])
        seconds = builder.load(cgutils.gep_inbounds(builder, slot, 0, 0))
        nanoseconds = builder.load(cgutils.gep_inbounds(builder, slot, 0, 1))
        return builder.add(builder.mul(seconds, ir.Constant(i64, _NS_PER_S)), nanoseconds)

    return types.int64(), codegen


@njit(cache=True, inline="always")
def monotonic_ns_nb():
    """``time.monotonic_ns()``, from compiled code."""
    return _clock_gettime_ns()


if config.DISABLE_JIT:  # the loop runs as plain Python (NUMBA_DISABLE_JIT=1: what compiling gains, bench_engine)
    monotonic_ns_nb = time.monotonic_ns  # noqa: F811 - an intrinsic has no Python body to fall back on
