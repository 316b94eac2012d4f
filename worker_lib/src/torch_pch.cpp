// The source of ddp_torch_pch (worker_lib/CMakeLists.txt): a target that
// exists to precompile <torch/torch.h> once for worker_lib and the programs
// and tests that link it. Nothing links this file's object.
