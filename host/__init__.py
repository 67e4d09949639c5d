"""What a node does to the host it runs on, below the services that use it and the ops
that start them: process liveness, the pod network's namespace."""
