"""Script mode and the Python API: profile the user's own training without editing it.

    launch   the child process: replica devices, hooks, then the user's script (`runpy`)
    hooks    patches that find the training steps and time input waits
    step_callback  the Keras callback the hooks inject into Model.fit to time its batches
    recorder the step window: warm-up, K measured steps, an optional trace, then the replays
    replay   phases B, H and C re-run on a batch captured from a real step
    join     measurements + lint findings of the script -> the same Report as reference mode
    parent   `tfdoctor profile -- python train.py`: run the child, turn failures into one line
    api      `tfdoctor.profile.session()` and `tfdoctor.profile.KerasCallback` for in-process use

Only `launch`, `hooks`, `recorder`, `replay` and `api` import TensorFlow; `join` and `parent` stay light.
"""
