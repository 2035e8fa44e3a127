"""What every runtime with host environments shares (Sebulba's and SEED's base):

  runtime.py  HostRuntime: the learner's state on the learner devices, checkpoints,
              evaluation, and the main thread's supervision of the threads
  channel.py  the one channel for experience: producers `put` trajectories, the learner
              `get`s them (TrajectoryQueue, TrajectoryReplay), with a producer's Batch
  learner.py  the learner thread: one loop over what the channel gives, and its update
  params.py   the parameters' store on the actor devices, and the policy-lag bound
  threads.py  a group of threads that stops together, with the first failure's cause
"""
