"""The Ascend NPU backend: Ascend C kernels compiled on the user's machine (aclrtc or bisheng),
loaded and launched through AscendCL (``import acl``) on torch_npu's current stream.

Modules, one job each, in the CUDA backend's roles: ``driver`` (is a usable Ascend stack here,
and what is missing), ``arch`` (arch and vector-core count of an NPU), ``variants`` (what can be
compiled), ``compiler`` (Ascend C source -> device binary, the cache's compiler), ``loader`` (the
kernel cache and loaded binaries), ``plan`` (tiling: rows per core, chunk, UB budget),
``launch`` (the parameter struct and the AscendCL launch), ``backend`` (``run``). Not yet run
on Ascend hardware.
"""
