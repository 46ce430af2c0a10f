"""The post-mortem: which rank failed first (``detect``), its exit record and the failure summary
(``failure``), why it died (``causes``, ``oom``), and what the ranks were doing (``stacks``, py-spy;
``flight_recorder``, PyTorch's NCCL dumps)."""
