"""The clock: races run side by side in one process on the device (timing), the trial a child
runs for the judge's clock (speedtrial), and the statistics of a verdict (speedstats).

It imports nothing of the judge or of isolation; the judge's verdicts on speed
(``msda_labs.grading.judge.speedjudge``, ``baseline``) read it.
"""
