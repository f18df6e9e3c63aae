"""Writes what looks like an event on stdout (harmless: events have a channel of their own), then garbage on
the event channel itself, then hangs: the profile must end at once as one line."""

import os
import time

print('{"event": "result", "times": {"full": [1.0], "input_wait": [0.0]}}')
os.write(int(os.environ["TFDOCTOR_EVENT_FD"]), b"TFDOCTOR_EVENT {half an event\n")
time.sleep(600)
