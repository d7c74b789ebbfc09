"""Small PTX kernels for testing the driver layer on a GPU (not used by cutile itself).

They are written by hand, JIT-compiled by the driver for the device, and shared by
the GPU tests of cuda_core and cuda_async:

- ``axpy(y, x, a, n)``: y[i] = a * x[i] + y[i] for i < n (f32);
- ``store_i64(out, v)``: out[0] = v (a 64-bit integer parameter);
- ``cluster_size(out)``: out[blockIdx.x] = the number of blocks in the block's cluster;
- ``sleep_then_store(out, v, ns)``: spins about ``ns`` nanoseconds, then out[0] = v
  (makes ordering and overlap visible);
- ``inc(out)``: out[0] += 1 (u32).
"""

PTX = r"""
.version 8.0
.target sm_90
.address_size 64

// y[i] = a * x[i] + y[i] for i < n
.visible .entry axpy(.param .u64 p_y, .param .u64 p_x, .param .f32 p_a, .param .u32 p_n)
{
    .reg .pred %p;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [p_y];
    ld.param.u64 %rd2, [p_x];
    ld.param.f32 %f1, [p_a];
    ld.param.u32 %r1, [p_n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p, %r5, %r1;
    @%p bra DONE;
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    mul.wide.u32 %rd5, %r5, 4;
    add.s64 %rd6, %rd3, %rd5;
    add.s64 %rd7, %rd4, %rd5;
    ld.global.f32 %f2, [%rd7];
    ld.global.f32 %f3, [%rd6];
    fma.rn.f32 %f3, %f1, %f2, %f3;
    st.global.f32 [%rd6], %f3;
DONE:
    ret;
}

// out[0] = v (a 64-bit integer parameter)
.visible .entry store_i64(.param .u64 p_out, .param .s64 p_v)
{
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [p_out];
    ld.param.s64 %rd2, [p_v];
    cvta.to.global.u64 %rd3, %rd1;
    st.global.s64 [%rd3], %rd2;
    ret;
}

// out[blockIdx.x] = number of blocks in this block's cluster
.visible .entry cluster_size(.param .u64 p_out)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [p_out];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %cluster_nctarank;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r2;
    ret;
}

// Spins for about `ns` nanoseconds, then out[0] = v: makes stream-ordering bugs visible.
.visible .entry sleep_then_store(.param .u64 p_out, .param .u32 p_v, .param .u64 p_ns)
{
    .reg .pred %p;
    .reg .b32 %r<2>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [p_out];
    ld.param.u32 %r1, [p_v];
    ld.param.u64 %rd2, [p_ns];
    mov.u64 %rd3, %globaltimer;
    add.s64 %rd4, %rd3, %rd2;
WAIT:
    nanosleep.u32 1000;
    mov.u64 %rd5, %globaltimer;
    setp.lt.u64 %p, %rd5, %rd4;
    @%p bra WAIT;
    cvta.to.global.u64 %rd6, %rd1;
    st.global.u32 [%rd6], %r1;
    ret;
}

// out[0] += 1 (one thread)
.visible .entry inc(.param .u64 p_out)
{
    .reg .b32 %r<3>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [p_out];
    cvta.to.global.u64 %rd2, %rd1;
    ld.global.u32 %r1, [%rd2];
    add.s32 %r2, %r1, 1;
    st.global.u32 [%rd2], %r2;
    ret;
}
"""
