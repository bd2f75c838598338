"""Scheduler Lab: entry point. Routes to the pages; all computing lives in ``engine/``."""

import streamlit as st

st.set_page_config(page_title="Scheduler Lab", page_icon=":material/schedule:", layout="wide")

lab = st.Page("pages/lab.py", title="Scheduler Lab", icon=":material/tune:", default=True)
st.navigation([lab]).run()
