// Memory read bandwidth with 1 and 2 threads (the roofline for the trunk matvec figures in
// docs/PERFORMANCE.md): sums a 256 MiB buffer with AVX-512 loads, best of 5.
//   gcc -O2 -mavx512f -fopenmp scripts/bench/mem_bandwidth.c -o /tmp/mem_bandwidth && /tmp/mem_bandwidth
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <immintrin.h>
#include <omp.h>
int main(){ size_t n=1UL<<28; char*a=aligned_alloc(64,n); memset(a,1,n);
 for(int t=1;t<=2;t++){ omp_set_num_threads(t);
 double best=1e9; for(int it=0;it<5;it++){ struct timespec s,e; clock_gettime(CLOCK_MONOTONIC,&s);
 __m512i tot=_mm512_setzero_si512();
 #pragma omp parallel
 { __m512i acc=_mm512_setzero_si512(); int id=omp_get_thread_num(),nt=omp_get_num_threads(); size_t ch=n/nt;
   for(size_t i=id*ch;i<(id+1)*ch;i+=64) acc=_mm512_add_epi64(acc,_mm512_load_si512(a+i));
   #pragma omp critical
   tot=_mm512_add_epi64(tot,acc);}
 clock_gettime(CLOCK_MONOTONIC,&e); double dt=(e.tv_sec-s.tv_sec)+(e.tv_nsec-s.tv_nsec)*1e-9; if(dt<best)best=dt; volatile long x=_mm512_reduce_add_epi64(tot);}
 printf("threads %d: %.2f GB/s\n",t,n/best/1e9);} }
