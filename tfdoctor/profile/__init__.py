"""The measuring half of tfdoctor: where each distributed training step's time goes.

Flow: devices -> workload -> phases / trace -> breakdown -> verdict -> suggestions -> report. Only
`worker` (run in a child process) imports TensorFlow; everything the user's process runs stays light.
"""
