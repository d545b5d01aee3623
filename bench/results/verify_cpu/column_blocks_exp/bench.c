#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include "/tmp/matvec_blocked.c"
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int argc,char**argv){
  int rows=atoi(argv[1]), d=atoi(argv[2]), n=atoi(argv[3]), mode=atoi(argv[4]), L=argc>5?atoi(argv[5]):30;
  size_t per=(size_t)rows*d; float*w=aligned_alloc(64,per*L*4); for(size_t i=0;i<per*L;i++) w[i]=(float)((i*2654435761u)%1000)/1000.f;
  float*x=aligned_alloc(64,(size_t)n*d*4); for(int i=0;i<n*d;i++) x[i]=(float)(i%97)/97.f;
  float*out=aligned_alloc(64,(size_t)n*rows*4), *ref=aligned_alloc(64,(size_t)n*rows*4);
  double best=1e9, tot=0; int reps=15;
  for(int rep=0;rep<reps;rep++){ double t=now();
    for(int l=0;l<L;l++){ const float*wl=w+per*l;
      if(mode==1) tiles_blocked(wl,rows,d,d,x,n,out,0,rows);
      else { /* unblocked */ int cm=mode>=2?mode:ROWS_MAX; int chunks=(n+cm-1)/cm; const float*p=wl;
        for(int i=0;i+2<=rows;i+=2,p+=2*(intptr_t)d) for(int r=0,m=chunks;r<n;m--){int c=(n-r+m-1)/m; tile2_c(p,d,x+(intptr_t)r*d,c,out+(intptr_t)r*rows+i,rows); r+=c;} }
    }
    t=now()-t; if(rep>2){tot+=t; if(t<best)best=t;} }
  printf("rows %d d %d n %d mode %d: best %.2f ms, mean %.2f ms, %.1f GMAC/s\n",rows,d,n,mode,best*1e3,tot/(reps-3)*1e3,(double)rows*d*n*L/best/1e9);
}
