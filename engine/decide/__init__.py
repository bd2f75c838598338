"""Decisions on top of runs: targets, rental cost, sizing, the planner (with mixed fleets), the tuner, the
diagnosis of a fleet, the customer report (and its PDF printer), and their text and charts.

May import every layer below: ``engine.scenario``, ``engine.hardware``, ``engine.sim``, ``engine.calibrate``.
"""
