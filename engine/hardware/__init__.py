"""The hardware model: GPU, model and format tables (``tables``), the roofline that turns them into step-time
coefficients and KV-cache capacity (``roofline``, ``steptime``) and the calibrations users saved
(``calibration_store``).

May import ``engine.scenario``.
"""
