# The CUDA emulation's text pass over src/backend/cuda (Makefile): a kernel
# launch `k<<<grid, block, shared, stream>>>(args)` becomes
# `k % ltc_emu::Launch(__FILE__, __LINE__, grid, block, shared, stream)(args)`
# (tests/cuda_emu/cuda_emu.h), and dynamic shared memory
# `extern __shared__ T name[];` a pointer to the launch's.
s/<<</ % ltc_emu::Launch(__FILE__, __LINE__, /g
s/>>>/)/g
s/extern __shared__ \([A-Za-z_][A-Za-z_0-9]*\) \([A-Za-z_][A-Za-z_0-9]*\)\[\];/\1 *const \2 = (\1 *)ltc_emu::dynamic_shared();/
