// tile_harness.cu: times one generated forward kernel alone, for tile experiments (bench/tile_sweep.sh).
// Build on the GPU host: nvcc -arch=sm_90a -O2 -DKFILE='"variant.cuh"' -o h bench/tile_harness.cu -lcuda
// where variant.cuh is `flashgen gen SPEC` output. Run: h B SQ SK H HKV [nocheck]. Without "nocheck" it first
// compares up to 4 heads of every batch with a double-precision reference (max error and LSE error
// printed). Times 30 launches after one, with CUDA events, and prints TFLOP/s (causal halves the FLOPs).
// Not a peer comparison: that is compare.py.
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include KFILE
#if FG_DTYPE_BF16
typedef __nv_bfloat16 T; static float tof(T x){return __bfloat162float(x);} static T fromf(float x){return __float2bfloat16(x);}
#else
typedef __half T; static float tof(T x){return __half2float(x);} static T fromf(float x){return __float2half(x);}
#endif
int main(int argc, char** argv) {
  int B=atoi(argv[1]), SQ=atoi(argv[2]), SK=atoi(argv[3]), H=atoi(argv[4]), HKV=atoi(argv[5]); int D=FG_HEAD_DIM;
  size_t nq=(size_t)B*SQ*H*D, nk=(size_t)B*SK*HKV*D;
  std::vector<T> q(nq), k(nk), v(nk), o(nq); std::vector<float> lse((size_t)B*H*SQ);
  srand(1); auto rn=[](){ float u1=(rand()+1.f)/(RAND_MAX+2.f), u2=(rand()+1.f)/(RAND_MAX+2.f); return sqrtf(-2*logf(u1))*cosf(6.2831853f*u2);};
  for(auto&x:q)x=fromf(rn()); for(auto&x:k)x=fromf(rn()); for(auto&x:v)x=fromf(rn());
  T *dq,*dk,*dv,*dout; float* dl; cudaMalloc(&dq,nq*2); cudaMalloc(&dk,nk*2); cudaMalloc(&dv,nk*2); cudaMalloc(&dout,nq*2); cudaMalloc(&dl,lse.size()*4);
  cudaMemcpy(dq,q.data(),nq*2,cudaMemcpyHostToDevice); cudaMemcpy(dk,k.data(),nk*2,cudaMemcpyHostToDevice); cudaMemcpy(dv,v.data(),nk*2,cudaMemcpyHostToDevice);
  cudaMemset(dout,0xff,nq*2);
  fg_fwd_params p={}; p.q=dq;p.k=dk;p.v=dv;p.o=dout;p.lse=dl;
  long long qs[3]={(long long)SQ*H*D,(long long)H*D,D}, ks[3]={(long long)SK*HKV*D,(long long)HKV*D,D};
  for(int i=0;i<3;i++){p.q_stride[i]=qs[i];p.o_stride[i]=qs[i];p.k_stride[i]=ks[i];p.v_stride[i]=ks[i];}
  p.lse_stride[0]=(long long)H*SQ; p.lse_stride[1]=SQ; p.lse_stride[2]=1;
  p.batch=B;p.heads_q=H;p.heads_kv=HKV;p.seqlen_q=SQ;p.seqlen_k=SK;p.head_dim=D;p.softmax_scale=1.f/sqrtf(D);p.scale_log2=p.softmax_scale*1.4426950408889634f;
  int smem=(FG_BLOCK_M+2*FG_BLOCK_N*FG_STAGES)*FG_HEAD_DIM_PADDED*2;
  cudaFuncSetAttribute(fg_attention_fwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  dim3 grid((SQ+FG_BLOCK_M-1)/FG_BLOCK_M,H,B);
  fg_attention_fwd_kernel<<<grid,FG_WARPS*32,smem>>>(p);
  cudaError_t e=cudaDeviceSynchronize(); if(e){printf("launch error %s\n",cudaGetErrorString(e));return 1;}
  cudaEvent_t a,b; cudaEventCreate(&a);cudaEventCreate(&b); cudaEventRecord(a); for(int i=0;i<30;i++) fg_attention_fwd_kernel<<<grid,FG_WARPS*32,smem>>>(p); cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms,a,b); ms/=30;
  cudaMemcpy(o.data(),dout,nq*2,cudaMemcpyDeviceToHost); cudaMemcpy(lse.data(),dl,lse.size()*4,cudaMemcpyDeviceToHost);
  double maxerr=0, maxl=0; int nan=0; std::vector<double> s(SK);
  int bcheck = argc > 6 ? 0 : B; int hcheck = H < 4 ? H : 4;
  for(int bb=0;bb<bcheck;bb++)for(int h=0;h<hcheck;h++)for(int i=0;i<SQ;i++){
    int kh=h/(H/HKV); double m=-INFINITY; int lim = FG_CAUSAL ? std::min(SK, i+SK-SQ+1) : SK;
    for(int j=0;j<lim;j++){double acc=0; for(int d=0;d<D;d++) acc+=(double)tof(q[((size_t)(bb*SQ+i)*H+h)*D+d])*tof(k[((size_t)(bb*SK+j)*HKV+kh)*D+d]); s[j]=acc/sqrt((double)D); m=std::max(m,s[j]);}
    double l=0; for(int j=0;j<lim;j++){s[j]=exp(s[j]-m); l+=s[j];}
    for(int d=0;d<D;d++){double acc=0; for(int j=0;j<lim;j++) acc+=s[j]*tof(v[((size_t)(bb*SK+j)*HKV+kh)*D+d]); double ref= l>0?acc/l:0; float got=tof(o[((size_t)(bb*SQ+i)*H+h)*D+d]); if(std::isnan(got)) nan++; maxerr=std::max(maxerr,fabs(got-ref));}
    double lref = l>0? m+log(l) : -INFINITY; float lg=lse[((size_t)bb*H+h)*SQ+i]; if (!(lref==-INFINITY && lg==-INFINITY)) maxl=std::max(maxl,fabs(lg-lref));
  }
  double fl=4.0*B*H*(double)SQ*SK*D*(FG_CAUSAL?0.5:1);
  printf("B%d SQ%d SK%d H%d HKV%d D%d causal%d: maxerr %.3e lse_err %.3e nan %d  %.3f ms %.1f TFLOP/s\n",B,SQ,SK,H,HKV,D,FG_CAUSAL,maxerr,maxl,nan,ms,fl/ms/1e9);
  return 0;
}
