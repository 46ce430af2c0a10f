"""Kubernetes (Kubeflow training operators): ``launcher=k8s`` inside a pod, ``submit=k8s`` from a workstation.

- :mod:`.env` -- what the operator tells a pod about its job (PET_*, MASTER_ADDR, ...), PURE;
- :mod:`.launch` -- ``launcher=k8s`` / ``k8s_jax``: the pod's topology into the config, PURE;
- :mod:`.startup` -- a pod waits until node 0's host name resolves (its pod may start later);
- :mod:`.manifest` -- the TrainJob / PyTorchJob manifest and the checks the operators make on it, PURE;
- :mod:`.submit` -- ``submit=k8s``, PURE but for ``create``: the checked job, its manifest;
- :mod:`.backend` -- ``submit=k8s`` as a Backend: dryrun, submit (write, ``kubectl create``), describe,
  logs, cancel;
- :mod:`.kubectl` -- every call to ``kubectl``, bounded in time (imports no Hydra: ``runs`` uses it).
"""
