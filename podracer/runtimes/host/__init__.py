"""What every runtime with host environments shares (Sebulba's and SEED's base):

  runtime.py  HostRuntime: the learner's state on the learner devices, checkpoints,
              evaluation, and the main thread's supervision of the threads
  learner.py  the learner thread: one loop over a batch source (queue or host replay)
  paths.py    the data path from producers to the learner (QueuePath, ReplayPath)
  batches.py  a producer's Batch and the outputs it goes through (ToLearners, ToReplay)
  params.py   the parameters' store on the actor devices, and the policy-lag bound
  threads.py  a group of threads that stops together, with the first failure's cause
"""
