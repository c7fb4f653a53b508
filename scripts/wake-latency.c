/*
 * Issue 59's obstacle, measured without tessera: ping-pong latency between two threads
 * of one process through a futex, an eventfd, a pipe, a socketpair, and an eventfd
 * waited on with epoll answered by a futex (the rings' path), beside HOGS CPU-bound
 * processes. Prints p50 and p99 per mechanism.
 *
 * Build and run (a few seconds; the hogs are killed at the end):
 *   cc -O2 -pthread -o /tmp/wake-latency scripts/wake-latency.c
 *   /tmp/wake-latency 8 2000      # 8 CPU-bound processes (4 per core on 2 cores)
 *   /tmp/wake-latency 8 2000 1    # both threads pinned to CPU 0
 *   /tmp/wake-latency 8 2000 2    # one thread on CPU 0, the other on CPU 1
 *
 * On the 2-core development machine (2026-11-28), beside 8: unpinned, every mechanism,
 * the plain futex included, was sometimes in a slow state for a whole block (p50 about
 * 25 us instead of 6-7 us, p99 up to 8 ms), at random from run to run. Pinned, the slow
 * state is exactly the two threads on different CPUs (futex 22 us / 8 ms), and the fast
 * one both on one CPU (futex 5.4 us / 5.9 us): docs/benchmarks.md, issue 59.
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static long long now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000000LL+t.tv_nsec;}
static int mode; static int rounds;
static _Atomic uint32_t f1, f2; // futex words
static int a[2], b[2]; // a: ping direction, b: pong direction
static int ep;
static void fwait(_Atomic uint32_t *w, uint32_t v){ while (atomic_load(w)==v) syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, v, 0,0,0); }
static void fwake(_Atomic uint32_t *w){ atomic_fetch_add(w,1); syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, 1,0,0,0); }
static void send1(int fd){ uint64_t x=1; if (write(fd,&x,mode==1?8:1)<0) exit(3); }
static void recv1(int fd){ uint64_t x; if (read(fd,&x,mode==1?8:1)<0) exit(3); }
static int pin; static void pinme(int cpu){ cpu_set_t s; CPU_ZERO(&s); CPU_SET(cpu,&s); pthread_setaffinity_np(pthread_self(),sizeof s,&s);}
static void *peer(void *arg){ (void)arg; if(pin==1) pinme(0); else if(pin==2) pinme(1); for(int i=0;i<rounds;i++){
  if(mode==0){ fwait(&f1,(uint32_t)i); fwake(&f2);}
  else if(mode==4){ struct epoll_event e; while(epoll_wait(ep,&e,1,-1)<1){} uint64_t x; if(read(a[0],&x,8)<0) exit(3); fwake(&f2);}
  else { recv1(a[0]); send1(b[1]); } } return 0; }
static int cmp(const void*x,const void*y){long long p=*(long long*)x,q=*(long long*)y;return p<q?-1:p>q;}
int main(int argc,char**argv){
  int hogs=atoi(argv[1]); rounds=atoi(argv[2]); pin=argc>3?atoi(argv[3]):0;
  pid_t pids[64]; for(int h=0;h<hogs;h++){ if((pids[h]=fork())==0){ volatile unsigned long x=0; for(;;) x++; } }
  usleep(200000); if(pin) pinme(0);
  const char*names[]={"futex","eventfd","pipe","socketpair","efd+epoll"};
  for(mode=0;mode<5;mode++){
    if(mode==1){a[0]=a[1]=eventfd(0,0); b[0]=b[1]=eventfd(0,0);}
    if(mode==2){ if(pipe(a)||pipe(b)) return 2; }
    if(mode==4){ a[0]=a[1]=eventfd(0,0); ep=epoll_create1(0); struct epoll_event e={.events=EPOLLIN}; epoll_ctl(ep,EPOLL_CTL_ADD,a[0],&e); }
    if(mode==3){ int s1[2],s2[2]; socketpair(AF_UNIX,SOCK_STREAM,0,s1); socketpair(AF_UNIX,SOCK_STREAM,0,s2); a[0]=s1[0];a[1]=s1[1];b[0]=s2[0];b[1]=s2[1]; }
    atomic_store(&f1,0); atomic_store(&f2,0);
    pthread_t t; pthread_create(&t,0,peer,0);
    long long *lat=malloc(sizeof(long long)*rounds);
    for(int i=0;i<rounds;i++){
      long long t0=now();
      if(mode==0){ uint32_t v=atomic_load(&f2); fwake(&f1); fwait(&f2,v);}
      else if(mode==4){ uint32_t v=atomic_load(&f2); uint64_t x=1; if(write(a[1],&x,8)<0) exit(3); fwait(&f2,v);}
      else { send1(a[1]); recv1(b[0]); }
      lat[i]=now()-t0;
    }
    pthread_join(t,0);
    qsort(lat,rounds,sizeof *lat,cmp);
    printf("%-10s hogs %2d  p50 %8.1f us  p99 %9.1f us\n",names[mode],hogs,lat[rounds/2]/1e3,lat[rounds*99/100]/1e3);
    free(lat);
  }
  for(int h=0;h<hogs;h++){ kill(pids[h],SIGKILL); waitpid(pids[h],0,0);} 
  return 0;
}
