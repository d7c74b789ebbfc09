/* The floor of a host loop of launches: cuLaunchKernel called from C on a cubin
 * with pre-packed parameters (BENCHMARKS.md quotes it for scale). Build and run on
 * a GPU machine (scripts/raw_launch/run.sh does both):
 *   nvcc -cubin -arch=sm_90 add_kernel.cu -o add.cubin
 *   gcc -O2 raw_launch.c -I$CUDA_HOME/include -lcuda -o raw_launch && ./raw_launch add.cubin
 * Prints µs per launch for five loops of 5000. */
#include <cuda.h>
#include <stdio.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  CUdevice d; CUcontext c; CUmodule m; CUfunction f; CUstream s;
  cuInit(0); cuDeviceGet(&d,0); cuDevicePrimaryCtxRetain(&c,d); cuCtxSetCurrent(c);
  if(cuModuleLoad(&m,argv[1])){printf("load failed\n");return 1;}
  cuModuleGetFunction(&f,m,"add"); cuStreamCreate(&s,CU_STREAM_NON_BLOCKING);
  CUdeviceptr z,x,y; cuMemAlloc(&z,4096);cuMemAlloc(&x,4096);cuMemAlloc(&y,4096);
  int n=1024; void* p[]={&z,&x,&y,&n};
  for(int r=0;r<5;r++){
    int N=5000; cuStreamSynchronize(s); double t0=now();
    for(int i=0;i<N;i++) cuLaunchKernel(f,1,1,1,128,1,1,0,s,p,0);
    double t1=now(); cuStreamSynchronize(s); double t2=now();
    printf("raw cuLaunchKernel loop: %.2f us/launch (with drain %.2f)\n",(t1-t0)/N*1e6,(t2-t0)/N*1e6);
  }
  return 0;
}
