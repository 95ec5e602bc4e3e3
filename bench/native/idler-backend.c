/*
 * The idler benchmark's native backend (bench/src/idler-bench.ts): the backend pods of the
 * hand-over, in C, so that accepting 10 000 connections does not take the proxy's cores the way a
 * Node backend does (on a cluster the pods run elsewhere; the peers bench uses nginx for the same
 * reason). It only counts: each accepted connection's first byte is read, its time taken, and the
 * connection closed.
 *
 *   idler-backend IP LISTENERS EXPECTED
 *
 * Listens LISTENERS times on IP (port 0 each, backlog as large as the kernel allows) and prints
 * "ports P1 P2 ...\n" on stdout. Then, on stdin:
 *   "w\n"  start waiting: the CPU baseline is taken now; "done ..." is printed once EXPECTED first
 *          bytes have arrived (at once if they already have);
 *   "r\n"  report now, whatever has arrived;
 * and it answers "done FIRST_BYTES LAST_NS CPU_US\n": LAST_NS is the last first byte's time on
 * CLOCK_MONOTONIC (the clock of Node's process.hrtime, so the bench compares it with the proxy's
 * event time across processes), CPU_US this process's user + system CPU since "w". It exits when
 * stdin closes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_LISTENERS 4096
#define MAX_EVENTS 512

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long cpu_us(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (long long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000LL + ru.ru_utime.tv_usec +
         ru.ru_stime.tv_usec;
}

static void fail(const char *what) {
  fprintf(stderr, "idler-backend: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* epoll data: listeners are tagged by index + 1 in the high half, stdin is 0, connections fd. */
#define TAG_LISTENER (1ULL << 32)

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: idler-backend IP LISTENERS EXPECTED\n");
    return 2;
  }
  struct in_addr ip;
  if (inet_pton(AF_INET, argv[1], &ip) != 1) {
    fprintf(stderr, "idler-backend: bad IPv4 address %s\n", argv[1]);
    return 2;
  }
  long listeners = strtol(argv[2], NULL, 10);
  long long expected = strtoll(argv[3], NULL, 10);
  if (listeners < 1 || listeners > MAX_LISTENERS || expected < 0) {
    fprintf(stderr, "idler-backend: LISTENERS must be 1..%d and EXPECTED >= 0\n", MAX_LISTENERS);
    return 2;
  }
  /* Room for every connection the proxy may open at once. */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) fail("epoll_create1");
  static int lfd[MAX_LISTENERS];
  printf("ports");
  for (long i = 0; i < listeners; i++) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) fail("socket");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr = ip, .sin_port = 0};
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) fail("bind");
    if (listen(fd, 65535) < 0) fail("listen");
    socklen_t len = sizeof sa;
    if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0) fail("getsockname");
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = TAG_LISTENER | (unsigned long long)i};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) fail("epoll_ctl listener");
    lfd[i] = fd;
    printf(" %u", ntohs(sa.sin_port));
  }
  printf("\n");
  fflush(stdout);
  fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
  struct epoll_event sev = {.events = EPOLLIN, .data.u64 = TAG_LISTENER - 1};
  if (epoll_ctl(ep, EPOLL_CTL_ADD, 0, &sev) < 0) fail("epoll_ctl stdin");

  long long first_bytes = 0, last_ns = 0, cpu_base = 0;
  int waiting = 0;
  char buf[4096];
  struct epoll_event evs[MAX_EVENTS];
  for (;;) {
    int n = epoll_wait(ep, evs, MAX_EVENTS, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("epoll_wait");
    }
    for (int k = 0; k < n; k++) {
      unsigned long long tag = evs[k].data.u64;
      if (tag == TAG_LISTENER - 1) {
        ssize_t got = read(0, buf, sizeof buf);
        if (got == 0) return 0;
        if (got < 0) {
          if (errno == EAGAIN || errno == EINTR) continue;
          return 0;
        }
        for (ssize_t j = 0; j < got; j++) {
          if (buf[j] == 'w') {
            cpu_base = cpu_us();
            waiting = 1;
          }
          if (buf[j] == 'w' || buf[j] == 'r') {
            if (buf[j] == 'r' || first_bytes >= expected) {
              printf("done %lld %lld %lld\n", first_bytes, last_ns, cpu_us() - cpu_base);
              fflush(stdout);
              waiting = 0;
            }
          }
        }
      } else if (tag & TAG_LISTENER) {
        int l = lfd[tag & 0xffffffffULL];
        for (;;) {
          int c = accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (c < 0) {
            /* EAGAIN: drained. EMFILE and the like: the rest wait in the queue for a later turn. */
            break;
          }
          struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = (unsigned)c};
          if (epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) < 0) close(c);
        }
      } else {
        int c = (int)tag;
        ssize_t got = read(c, buf, sizeof buf);
        if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (got > 0) {
          last_ns = now_ns();
          first_bytes++;
        }
        /* First byte counted, or the peer went away first: either way the connection is done. */
        close(c);
        if (got > 0 && waiting && first_bytes == expected) {
          printf("done %lld %lld %lld\n", first_bytes, last_ns, cpu_us() - cpu_base);
          fflush(stdout);
          waiting = 0;
        }
      }
    }
  }
}
