/*
 * What the SHA-NI unit allows on this machine, without Rust or the crate:
 * K independent chains of sha256rnds2 alone, of a whole 4-round group
 * (sha256msg1 + sha256msg2 + two sha256rnds2, as in a compression), and of
 * sha256msg1 / sha256msg2 alone. Figures are instructions per ns.
 * The K=1 msg1/msg2 figures are meaningless (the compiler folds them).
 *
 *   gcc -O3 -funroll-all-loops -msha -msse4.1 -mssse3 scripts/sha-ni-ceiling.c -o /tmp/ceiling && /tmp/ceiling
 *
 * BENCHMARKS.md ("Lanes") quotes its output.
 */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
#include <stdint.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define ITER 20000000L
// K independent chains of rnds2 pairs (as in a compression: cdgh<-rnds2(cdgh,abef,t); abef<-rnds2(abef,cdgh,t'))
#define RN(K) static double rn##K(){ __m128i a[K],c[K]; __m128i t=_mm_set1_epi32(0x12345); for(int i=0;i<K;i++){a[i]=_mm_set1_epi32(i);c[i]=_mm_set1_epi32(i*7);} double s=now(); for(long n=0;n<ITER;n++){ for(int i=0;i<K;i++) c[i]=_mm_sha256rnds2_epu32(c[i],a[i],t); for(int i=0;i<K;i++) a[i]=_mm_sha256rnds2_epu32(a[i],c[i],t);} double e=now()-s; __m128i x=a[0]; for(int i=0;i<K;i++) x=_mm_xor_si128(x,_mm_xor_si128(a[i],c[i])); volatile int v=_mm_cvtsi128_si32(x); return 2.0*K*ITER/e/1e9;}
// full group pattern: schedule (msg1, alignr, add, msg2) + add k + 2 rnds2, per chain
#define FG(K) static double fg##K(){ __m128i a[K],c[K],w0[K],w1[K],w2[K],w3[K]; __m128i k=_mm_set1_epi32(0x12345); for(int i=0;i<K;i++){a[i]=_mm_set1_epi32(i);c[i]=_mm_set1_epi32(i*7);w0[i]=_mm_set1_epi32(i+1);w1[i]=_mm_set1_epi32(i+2);w2[i]=_mm_set1_epi32(i+3);w3[i]=_mm_set1_epi32(i+4);} double s=now(); for(long n=0;n<ITER;n++){ for(int i=0;i<K;i++){ __m128i t1=_mm_sha256msg1_epu32(w0[i],w1[i]); __m128i t2=_mm_alignr_epi8(w3[i],w2[i],4); __m128i nw=_mm_sha256msg2_epu32(_mm_add_epi32(t1,t2),w3[i]); w0[i]=w1[i];w1[i]=w2[i];w2[i]=w3[i];w3[i]=nw; __m128i t=_mm_add_epi32(nw,k); c[i]=_mm_sha256rnds2_epu32(c[i],a[i],t); a[i]=_mm_sha256rnds2_epu32(a[i],c[i],_mm_shuffle_epi32(t,0x0e)); } } double e=now()-s; __m128i x=a[0]; for(int i=0;i<K;i++) x=_mm_xor_si128(x,_mm_xor_si128(a[i],c[i])); volatile int v=_mm_cvtsi128_si32(x); return 2.0*K*ITER/e/1e9;}
// msg1 only, independent chains
#define M1(K) static double m1##K(){ __m128i a[K]; __m128i b=_mm_set1_epi32(99); for(int i=0;i<K;i++)a[i]=_mm_set1_epi32(i); double s=now(); for(long n=0;n<ITER;n++){ for(int i=0;i<K;i++) a[i]=_mm_sha256msg1_epu32(a[i],b);} double e=now()-s; __m128i x=a[0]; for(int i=0;i<K;i++) x=_mm_xor_si128(x,a[i]); volatile int v=_mm_cvtsi128_si32(x); return 1.0*K*ITER/e/1e9;}
#define M2(K) static double m2##K(){ __m128i a[K]; __m128i b=_mm_set1_epi32(99); for(int i=0;i<K;i++)a[i]=_mm_set1_epi32(i); double s=now(); for(long n=0;n<ITER;n++){ for(int i=0;i<K;i++) a[i]=_mm_sha256msg2_epu32(a[i],b);} double e=now()-s; __m128i x=a[0]; for(int i=0;i<K;i++) x=_mm_xor_si128(x,a[i]); volatile int v=_mm_cvtsi128_si32(x); return 1.0*K*ITER/e/1e9;}
RN(1) RN(2) RN(3) RN(4) FG(1) FG(2) FG(3) FG(4) M1(1) M1(4) M1(8) M2(1) M2(4) M2(8)
int main(){
 printf("rnds2 pairs only, rnds2/ns: K=1 %.2f K=2 %.2f K=3 %.2f K=4 %.2f\n", rn1(),rn2(),rn3(),rn4());
 printf("full 4-round group (msg1+msg2+2 rnds2), rnds2/ns: K=1 %.2f K=2 %.2f K=3 %.2f K=4 %.2f\n", fg1(),fg2(),fg3(),fg4());
 printf("msg1 /ns: K=1 %.2f K=4 %.2f K=8 %.2f\n", m11(),m14(),m18());
 printf("msg2 /ns: K=1 %.2f K=4 %.2f K=8 %.2f\n", m21(),m24(),m28());
}
