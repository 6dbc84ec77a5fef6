"""`streamlit` with every script run timed: for benches that need the server's side of a rerun.

    LB_RUN_LOG=runs.txt python bench/timed_server.py run app.py [streamlit options]

Each finished script run (a whole page or a fragment) appends one line to $LB_RUN_LOG:
`<unix time> <wall s> <CPU s of its thread>`. Wall minus CPU is time the run waited, mostly for
the GIL while other sessions' runs and the server's event loop held it.
"""

import os
import sys
import time

from streamlit.runtime.scriptrunner import script_runner
from streamlit.web.cli import main

LOG = os.environ["LB_RUN_LOG"]
_run_script = script_runner.ScriptRunner._run_script


def _timed(self, rerun_data):
    wall, cpu = time.perf_counter(), time.thread_time()
    try:
        return _run_script(self, rerun_data)
    finally:
        line = f"{time.time():.6f} {time.perf_counter() - wall:.6f} {time.thread_time() - cpu:.6f}\n"
        with open(LOG, "a") as log:
            log.write(line)


script_runner.ScriptRunner._run_script = _timed

if __name__ == "__main__":
    sys.argv[0] = "streamlit"
    sys.exit(main())
