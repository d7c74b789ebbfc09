// The 1024-element add that bench_elementwise.py times, as plain CUDA (for raw_launch.c).
extern "C" __global__ void add(float* z, const float* x, const float* y, int n){int i=blockIdx.x*blockDim.x+threadIdx.x; if(i<n) z[i]=x[i]+y[i];}
