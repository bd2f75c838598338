"""Streamlit-aware helpers for the pages: scenario state and URL, cached engine calls, widgets, charts."""
