"""The Ascend NPU backend: Ascend C kernels compiled on the user's machine (aclrtc or bisheng),
loaded and launched through AscendCL (``import acl``) on torch_npu's current stream.

Modules, one job each: ``probe`` (is a usable Ascend stack here, and what is missing),
``device`` (arch and vector-core count of an NPU), ``variants`` (what can be compiled),
``compiler`` (Ascend C source -> device binary), ``kernel_cache`` (the shared kernel cache with
the CANN version and NPU arch in the key), ``tiling`` (rows per core, chunk, UB budget), ``args``
(the kernel's parameter struct), ``launch`` (AscendCL load and launch), ``backend`` (``run``).
Nothing here has been run on Ascend hardware yet (README, "Ascend NPUs").
"""
