"""Where a page's long searches (the planner, the tuner) run: the local cores, or the workers of the Dask
scheduler that this server's operator named in ``$SCHEDULER_LAB_DASK_SCHEDULER``.

Only the operator chooses the address: a page never connects to an address a visitor types, since a Dask
scheduler sends pickled results back, and unpickling runs code. With the variable set, each page offers a switch
(on by default) between that cluster and the local cores.
"""

from __future__ import annotations

import contextlib
import os

import streamlit as st

from engine.sim.parallel import dask_cluster

DASK_ENV = "SCHEDULER_LAB_DASK_SCHEDULER"


def choice(key: str):
    """A switch for the operator's Dask cluster when there is one; returns the context to run the search in."""
    address = os.environ.get(DASK_ENV, "").strip()
    if not address:
        return contextlib.nullcontext()
    use = st.toggle(f"Run on the Dask cluster at {address}", value=True, key=key,
                    help="This server's operator set a Dask scheduler; its workers run the simulations. Off: this "
                         "server's own cores. The answer is the same either way.")
    return dask_cluster(address, source=f"${DASK_ENV}") if use else contextlib.nullcontext()
