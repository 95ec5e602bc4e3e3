/*
 * sctp-udp-helper: the UDP sockets of @userspace-proxy/sctp's `udpIo: 'helper'` transport (RFC 6951
 * SCTP over UDP), moved in batches. Node 20 sends and receives one datagram per call, each with a
 * JavaScript callback, a Buffer and a system call; this program owns the UDP sockets instead, reads
 * them with recvmmsg (up to BATCH datagrams per call) and writes them with sendmmsg (up to
 * SEND_QUEUE per call, runs of them as one GSO send each: below), and frames the
 * datagrams to and from the Node process over its stdin / stdout in large reads and writes. It also
 * does the SCTP checksum (CRC32c, RFC 9260 appendix B): datagrams whose checksum is wrong are counted
 * and reported instead of forwarded, and every datagram sent gets its checksum written here, so the
 * JavaScript side does neither. It parses nothing else of SCTP: the guard's other checks, the
 * demultiplexing and the associations stay in TypeScript.
 *
 * Frame: u32 length of what follows (big-endian), u8 type, body. Integers are big-endian.
 *   Node -> helper
 *   'B' u32 req, u32 bufBytes, u16 port, u16 rport, u8 llen, local, u8 rlen, remote
 *        bind a UDP socket to local (text address) : port; with rport != 0, connect it to remote
 *   'C' u32 handle                     close it
 *   'S' u32 handle, u16 port, u8 alen, addr, packet
 *        send packet (checksum written here) to addr:port; alen 4: binary IPv4, 0x80 | n: the
 *        address as n bytes of text, 0: the connected peer
 *   helper -> Node
 *   'H' u32 version                    hello
 *   'b' u32 req, i32 err, u32 handle, u16 port      answer to 'B' (err: errno or 0)
 *   'P' u32 handle, u16 port, u8 alen, addr, packet
 *        a datagram whose checksum is right (or shorter than an SCTP common header and one chunk
 *        header, for Node to refuse); alen as in 'S' (4: binary IPv4, 0x80 | n: text)
 *   'K' u32 handle, u32 count, u16 port, u8 alen, addr, u16 length, first bytes (up to 16)
 *        `count` datagrams refused for a bad checksum since the last 'K', the first one's source
 *   'E' u32 handle, u32 count, i32 errno            `count` sends failed (the last errno)
 *   'G' u32 gso sends, u32 gso segments, u32 gso refused, i32 errno, u32 gro reads, u32 gro segments
 *        what UDP GSO / GRO did since the last 'G' (at most one per wake-up, when something did)
 * Handles carry a generation, so a frame for a closed socket never reaches a new one.
 * The helper exits when stdin closes, on a malformed frame, or when its parent dies.
 *
 * UDP GSO / GRO (Linux >= 4.18 / 5.0; off with --no-gso / --no-gro): a run of datagrams of one
 * socket to one destination, all of one size but the last (which may be shorter), leaves as one
 * sendmsg with a UDP_SEGMENT cmsg, so the kernel's IP, netfilter and device work is done once per
 * run instead of once per datagram (the segments on the wire are the same datagrams). A socket
 * whose GSO send the kernel refuses (EIO: no checksum offload on the route; EINVAL / EMSGSIZE: a
 * segment larger than the route's MTU, or no GSO at all) sends without it from then on, the
 * refused datagrams again one by one, and the refusal is counted. With UDP_GRO set, a datagram
 * read may be several coalesced ones (a GSO sender's run, delivered whole on loopback): it is
 * split at the UDP_GRO cmsg's segment size before its checksums are checked and it is framed to
 * Node, which therefore sees the same datagrams either way.
 *
 * One file of about 750 lines on purpose: it is compiled on first use from this one source
 * (buildNativeHelper is given one path, and the package ships it as is), and its parts (framing,
 * checksum, sockets, send runs) share the static batch buffers above, which split files would
 * have to expose to each other.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define VERSION 2
#define MAX_SOCKETS 4096
#define BATCH 64
/* datagrams queued for one socket before they go out in one sendmmsg */
#define SEND_QUEUE 256
/* segments and payload bytes of one GSO send (UDP_MAX_SEGMENTS was 64 before Linux 5.5; an IPv4
   datagram carries at most 65 507 bytes) */
#define GSO_MAX_SEGS 64
#define GSO_MAX_BYTES 65000
#define SLOT_BYTES 65536
#define MAX_FRAME (SLOT_BYTES + 64)
#define IN_CAP (1 << 20)
#define OUT_FLUSH (256 * 1024)
#define OUT_CAP (1 << 20)
/* recvmmsg rounds per socket per wake-up before the others get their turn */
#define ROUNDS 4
#define MIN_SCTP 16

struct sock {
  int fd; /* -1 when free */
  uint32_t handle;
  uint16_t gen;
  int family;
  uint32_t bad; /* bad checksums not yet reported */
  unsigned char bad_src[64];
  size_t bad_src_len;
  uint16_t bad_port;
  unsigned char bad_head[18]; /* u16 length, then up to 16 bytes */
  size_t bad_head_len;
  uint32_t send_errors;
  int32_t last_errno;
  int gso_off; /* the kernel refused a GSO send on this socket */
};

static struct sock socks[MAX_SOCKETS];
static int nsocks;
static int ep;
static unsigned char inbuf[IN_CAP];
static size_t inlen;
static unsigned char outbuf[OUT_CAP];
static size_t outlen;

static unsigned char *rbuf; /* BATCH * SLOT_BYTES */
static struct mmsghdr rmsgs[BATCH];
static struct iovec riov[BATCH];
static struct sockaddr_storage raddrs[BATCH];

static char rctl[BATCH][CMSG_SPACE(sizeof(int))];

/* the datagrams queued for socket scur: their bytes (in inbuf) and destinations */
static struct iovec siov[SEND_QUEUE];
static struct sockaddr_storage saddrs[SEND_QUEUE];
static socklen_t snamelen[SEND_QUEUE]; /* 0: the connected peer */
static int sn;
static struct sock *scur;
static int errors_pending;
/* one sendmmsg: each message one datagram, or a GSO run of them */
static struct mmsghdr gmsgs[SEND_QUEUE];
static char gctl[SEND_QUEUE][CMSG_SPACE(sizeof(uint16_t))];
static int gcount[SEND_QUEUE]; /* datagrams in each message */

static int use_gso = 1, use_gro = 1;
/* what GSO / GRO did since the last 'G' frame */
static uint32_t gso_sends, gso_segments, gso_refused, gro_reads, gro_segments;
static int32_t gso_errno;

/* ---- CRC32c ---- */

static uint32_t table[8][256];

static void crc_init(void) {
  for (uint32_t n = 0; n < 256; n++) {
    uint32_t c = n;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    table[0][n] = c;
  }
  for (uint32_t n = 0; n < 256; n++)
    for (int k = 1; k < 8; k++) table[k][n] = table[0][table[k - 1][n] & 0xff] ^ (table[k - 1][n] >> 8);
}

static uint32_t crc_table(uint32_t crc, const unsigned char *p, size_t n) {
  while (n >= 8) {
    uint32_t a = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
    crc = table[7][a & 0xff] ^ table[6][(a >> 8) & 0xff] ^ table[5][(a >> 16) & 0xff] ^
          table[4][a >> 24] ^ table[3][p[4]] ^ table[2][p[5]] ^ table[1][p[6]] ^ table[0][p[7]];
    p += 8;
    n -= 8;
  }
  while (n--) crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const unsigned char *p, size_t n) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = (uint32_t)c;
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}
static int have_hw;
#endif

static uint32_t crc_update(uint32_t crc, const unsigned char *p, size_t n) {
#if defined(__x86_64__)
  if (have_hw) return crc_hw(crc, p, n);
#endif
  return crc_table(crc, p, n);
}

/* The SCTP checksum of a packet, its checksum field taken as zero. */
static uint32_t sctp_crc(const unsigned char *p, size_t n) {
  static const unsigned char zero[4];
  uint32_t c = crc_update(0xffffffffu, p, 8);
  c = crc_update(c, zero, 4);
  c = crc_update(c, p + 12, n - 12);
  return ~c;
}

/* ---- frames out ---- */

static void put32(unsigned char *p, uint32_t v) {
  p[0] = v >> 24;
  p[1] = v >> 16;
  p[2] = v >> 8;
  p[3] = v;
}
static void put16(unsigned char *p, uint16_t v) {
  p[0] = v >> 8;
  p[1] = v;
}
static uint32_t get32(const unsigned char *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static uint16_t get16(const unsigned char *p) { return (uint16_t)((p[0] << 8) | p[1]); }

static void flush_out(void) {
  size_t off = 0;
  while (off < outlen) {
    ssize_t n = write(1, outbuf + off, outlen - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      exit(0); /* the parent is gone */
    }
    off += (size_t)n;
  }
  outlen = 0;
}

/* Room for a frame of `body` bytes after its length; returns where the body starts. */
static unsigned char *frame(unsigned char type, size_t body) {
  if (outlen + 5 + body > OUT_CAP) flush_out();
  unsigned char *p = outbuf + outlen;
  put32(p, (uint32_t)(1 + body));
  p[4] = type;
  outlen += 5 + body;
  return p + 5;
}

/* The source address as a frame writes it: 4 binary bytes for IPv4, text otherwise. */
static size_t addr_bytes(const struct sockaddr_storage *sa, unsigned char *out, uint16_t *port) {
  if (sa->ss_family == AF_INET6 &&
      IN6_IS_ADDR_V4MAPPED(&((const struct sockaddr_in6 *)sa)->sin6_addr)) {
    /* an IPv4 peer of a dual-stack socket: text, as node:dgram reports it (::ffff:a.b.c.d) */
  } else if (sa->ss_family == AF_INET) {
    const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
    memcpy(out, &s->sin_addr, 4);
    *port = ntohs(s->sin_port);
    return 4;
  }
  const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
  *port = ntohs(s->sin6_port);
  if (!inet_ntop(AF_INET6, &s->sin6_addr, (char *)out, 64)) return 0;
  return strlen((char *)out);
}

/* The address byte of a frame: 4 for binary IPv4, 0x80 | length for text. */
static unsigned char alen_byte(size_t n) { return n == 4 ? 4 : (unsigned char)(0x80 | n); }

static void report_bad(struct sock *s) {
  if (s->bad == 0) return;
  unsigned char *p = frame('K', 4 + 4 + 2 + 1 + s->bad_src_len + s->bad_head_len);
  put32(p, s->handle);
  put32(p + 4, s->bad);
  put16(p + 8, s->bad_port);
  p[10] = alen_byte(s->bad_src_len);
  memcpy(p + 11, s->bad_src, s->bad_src_len);
  memcpy(p + 11 + s->bad_src_len, s->bad_head, s->bad_head_len);
  s->bad = 0;
}

static void report_errors(struct sock *s) {
  if (s->send_errors == 0) return;
  unsigned char *p = frame('E', 12);
  put32(p, s->handle);
  put32(p + 4, s->send_errors);
  put32(p + 8, (uint32_t)s->last_errno);
  s->send_errors = 0;
}

static void report_gso(void) {
  if ((gso_sends | gso_refused | gro_reads) == 0) return;
  unsigned char *p = frame('G', 24);
  put32(p, gso_sends);
  put32(p + 4, gso_segments);
  put32(p + 8, gso_refused);
  put32(p + 12, (uint32_t)gso_errno);
  put32(p + 16, gro_reads);
  put32(p + 20, gro_segments);
  gso_sends = gso_segments = gso_refused = gro_reads = gro_segments = 0;
  gso_errno = 0;
}

/* ---- sockets ---- */

static struct sock *find(uint32_t handle) {
  uint32_t i = handle & 0xffff;
  if (i >= (uint32_t)nsocks || socks[i].fd < 0 || socks[i].handle != handle) return NULL;
  return &socks[i];
}

static int parse_addr(const unsigned char *text, size_t len, uint16_t port,
                      struct sockaddr_storage *sa, socklen_t *sl) {
  char buf[64];
  if (len == 0 || len >= sizeof buf) return -1;
  memcpy(buf, text, len);
  buf[len] = 0;
  memset(sa, 0, sizeof *sa);
  struct sockaddr_in *s4 = (struct sockaddr_in *)sa;
  if (inet_pton(AF_INET, buf, &s4->sin_addr) == 1) {
    s4->sin_family = AF_INET;
    s4->sin_port = htons(port);
    *sl = sizeof *s4;
    return AF_INET;
  }
  struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
  if (inet_pton(AF_INET6, buf, &s6->sin6_addr) == 1) {
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(port);
    *sl = sizeof *s6;
    return AF_INET6;
  }
  return -1;
}

static void answer_bind(uint32_t req, int32_t err, uint32_t handle, uint16_t port) {
  unsigned char *p = frame('b', 14);
  put32(p, req);
  put32(p + 4, (uint32_t)err);
  put32(p + 8, handle);
  put16(p + 12, port);
}

static void do_bind(uint32_t req, uint32_t buf_bytes, uint16_t port, uint16_t rport,
                    const unsigned char *local, size_t llen, const unsigned char *remote,
                    size_t rlen) {
  struct sockaddr_storage la, ra;
  socklen_t ll, rl;
  int fam = parse_addr(local, llen, port, &la, &ll);
  if (fam < 0) {
    answer_bind(req, EINVAL, 0, 0);
    return;
  }
  if (rport != 0 && parse_addr(remote, rlen, rport, &ra, &rl) != fam) {
    answer_bind(req, EAFNOSUPPORT, 0, 0);
    return;
  }
  int idx = -1;
  for (int i = 0; i < nsocks; i++)
    if (socks[i].fd < 0) {
      idx = i;
      break;
    }
  if (idx < 0) {
    if (nsocks == MAX_SOCKETS) {
      answer_bind(req, EMFILE, 0, 0);
      return;
    }
    idx = nsocks++;
    socks[idx].fd = -1;
  }
  int fd = socket(fam, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    answer_bind(req, errno, 0, 0);
    return;
  }
  if (fam == AF_INET6) {
    int off = 0; /* as node:dgram's udp6: IPv4-mapped peers too */
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
  }
  if (buf_bytes > 0) {
    int size = (int)buf_bytes;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
  }
  if (bind(fd, (struct sockaddr *)&la, ll) < 0 ||
      (rport != 0 && connect(fd, (struct sockaddr *)&ra, rl) < 0)) {
    int e = errno;
    close(fd);
    answer_bind(req, e, 0, 0);
    return;
  }
  struct sockaddr_storage got;
  socklen_t gl = sizeof got;
  getsockname(fd, (struct sockaddr *)&got, &gl);
  uint16_t bound = ntohs(((struct sockaddr_in *)&got)->sin_port); /* same offset in sin6 */
  struct sock *s = &socks[idx];
  s->gen = (uint16_t)(s->gen + 1);
  s->fd = fd;
  s->handle = ((uint32_t)s->gen << 16) | (uint32_t)idx;
  s->family = fam;
  s->bad = 0;
  s->send_errors = 0;
  s->gso_off = !use_gso;
  if (use_gro) {
    int on = 1; /* refused by a kernel before 5.0: datagrams then come one by one, as without */
    setsockopt(fd, IPPROTO_UDP, UDP_GRO, &on, sizeof on);
  }
  struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)idx + 1};
  epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
  answer_bind(req, 0, s->handle, bound);
}

static int same_dest(int a, int b) {
  return snamelen[a] == snamelen[b] &&
         (snamelen[a] == 0 || memcmp(&saddrs[a], &saddrs[b], snamelen[a]) == 0);
}

/*
 * The messages of one sendmmsg for the queued datagrams from `from` on: with GSO, each run of
 * datagrams to one destination whose sizes are all the first's but the last's (not larger) is one
 * message with a UDP_SEGMENT cmsg; every other datagram is a message of its own.
 */
static int build_messages(const struct sock *s, int from) {
  int ng = 0;
  for (int i = from; i < sn; ng++) {
    size_t seg = siov[i].iov_len;
    size_t total = seg;
    int n = 1;
    if (!s->gso_off && seg > 0) {
      while (i + n < sn && n < GSO_MAX_SEGS) {
        size_t l = siov[i + n].iov_len;
        if (l == 0 || l > seg || total + l > GSO_MAX_BYTES || !same_dest(i, i + n)) break;
        total += l;
        n++;
        if (l < seg) break; /* only the last segment may be shorter */
      }
    }
    struct msghdr *h = &gmsgs[ng].msg_hdr;
    memset(h, 0, sizeof *h);
    if (snamelen[i] != 0) {
      h->msg_name = &saddrs[i];
      h->msg_namelen = snamelen[i];
    }
    h->msg_iov = &siov[i];
    h->msg_iovlen = (size_t)n;
    if (n > 1) {
      memset(gctl[ng], 0, sizeof gctl[ng]);
      h->msg_control = gctl[ng];
      h->msg_controllen = sizeof gctl[ng];
      struct cmsghdr *c = CMSG_FIRSTHDR(h);
      c->cmsg_level = IPPROTO_UDP;
      c->cmsg_type = UDP_SEGMENT;
      c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
      uint16_t gso = (uint16_t)seg;
      memcpy(CMSG_DATA(c), &gso, sizeof gso);
    }
    gcount[ng] = n;
    i += n;
  }
  return ng;
}

/* Sends the queued datagrams of scur (GSO runs where they form), then forgets them. */
static void send_batch(void) {
  if (sn == 0) return;
  struct sock *s = scur;
  int done = 0; /* datagrams sent or dropped */
  while (done < sn) {
    int ng = build_messages(s, done);
    int r = sendmmsg(s->fd, gmsgs, (unsigned)ng, MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      if (gcount[0] > 1 && (e == EIO || e == EINVAL || e == EMSGSIZE || e == EOPNOTSUPP ||
                            e == ENOPROTOOPT)) {
        /* the kernel refuses GSO here (no checksum offload on the route, a segment over its
           MTU, no UDP_SEGMENT): this socket sends one datagram a message from now on */
        s->gso_off = 1;
        gso_refused++;
        gso_errno = e;
        continue;
      }
      s->last_errno = e;
      errors_pending = 1;
      if (e == EAGAIN || e == EWOULDBLOCK || e == ENOBUFS) {
        /* a full socket buffer: the rest would fail alike, one call each; drop them together */
        s->send_errors += (uint32_t)(sn - done);
        break;
      }
      /* this message failed (an unreachable peer, say): drop it, go on with the next */
      s->send_errors += (uint32_t)gcount[0];
      done += gcount[0];
      continue;
    }
    for (int k = 0; k < r; k++) {
      done += gcount[k];
      if (gcount[k] > 1) {
        gso_sends++;
        gso_segments += (uint32_t)gcount[k];
      }
    }
  }
  sn = 0;
  scur = NULL;
}

static void do_close(uint32_t handle) {
  struct sock *s = find(handle);
  if (s == NULL) return;
  if (scur == s) send_batch();
  report_errors(s);
  epoll_ctl(ep, EPOLL_CTL_DEL, s->fd, NULL);
  close(s->fd);
  s->fd = -1;
}

/* Queues one datagram (its checksum written in place) for the current sendmmsg batch. */
static void do_send(uint32_t handle, uint16_t port, unsigned alen, const unsigned char *addr,
                    unsigned char *data, size_t len) {
  struct sock *s = find(handle);
  if (s == NULL) return; /* closed meanwhile: Node forgot it too */
  unsigned char bin[16];
  if (alen & 0x80) {
    char text[64];
    size_t n = alen & 0x7f;
    if (n >= sizeof text) return;
    memcpy(text, addr, n);
    text[n] = 0;
    if (inet_pton(AF_INET, text, bin) == 1) {
      alen = 4;
    } else if (inet_pton(AF_INET6, text, bin) == 1) {
      alen = 16;
    } else {
      s->send_errors++;
      s->last_errno = EINVAL;
      errors_pending = 1;
      return;
    }
    addr = bin;
  }
  if (scur != s || sn == SEND_QUEUE) send_batch();
  scur = s;
  if (len >= 12) {
    uint32_t c = sctp_crc(data, len);
    data[8] = c & 0xff;
    data[9] = (c >> 8) & 0xff;
    data[10] = (c >> 16) & 0xff;
    data[11] = (c >> 24) & 0xff;
  }
  siov[sn].iov_base = data;
  siov[sn].iov_len = len;
  snamelen[sn] = 0;
  if (alen == 4 && s->family == AF_INET) {
    struct sockaddr_in *sa = (struct sockaddr_in *)&saddrs[sn];
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons(port);
    memcpy(&sa->sin_addr, addr, 4);
    snamelen[sn] = sizeof *sa;
  } else if (alen == 4 || alen == 16) {
    struct sockaddr_in6 *sa = (struct sockaddr_in6 *)&saddrs[sn];
    memset(sa, 0, sizeof *sa);
    sa->sin6_family = AF_INET6;
    sa->sin6_port = htons(port);
    if (alen == 16) {
      memcpy(&sa->sin6_addr, addr, 16);
    } else { /* an IPv4 peer of a dual-stack socket: IPv4-mapped */
      sa->sin6_addr.s6_addr[10] = 0xff;
      sa->sin6_addr.s6_addr[11] = 0xff;
      memcpy(&sa->sin6_addr.s6_addr[12], addr, 4);
    }
    snamelen[sn] = sizeof *sa;
  }
  sn++;
}

/* One frame from Node; 0 when it is malformed. */
static int handle_frame(unsigned char *p, size_t len) {
  if (len < 1) return 0;
  unsigned char type = p[0];
  p++;
  len--;
  switch (type) {
    case 'B': {
      if (len < 14) return 0;
      size_t llen = p[12];
      if (len < 13 + llen + 1) return 0;
      size_t rlen = p[13 + llen];
      if (len != 14 + llen + rlen) return 0;
      if (scur != NULL) send_batch();
      do_bind(get32(p), get32(p + 4), get16(p + 8), get16(p + 10), p + 13, llen, p + 14 + llen,
              rlen);
      return 1;
    }
    case 'C':
      if (len != 4) return 0;
      do_close(get32(p));
      return 1;
    case 'S': {
      if (len < 7) return 0;
      unsigned a = p[6];
      size_t alen = a & 0x80 ? a & 0x7f : a;
      if (a != 0 && a != 4 && !(a & 0x80)) return 0;
      if (len < 7 + alen) return 0;
      do_send(get32(p), get16(p + 4), a, p + 7, p + 7 + alen, len - 7 - alen);
      return 1;
    }
    default:
      return 0;
  }
}

static void read_stdin(void) {
  ssize_t n = read(0, inbuf + inlen, IN_CAP - inlen);
  if (n == 0) {
    flush_out();
    exit(0);
  }
  if (n < 0) {
    if (errno == EINTR || errno == EAGAIN) return;
    exit(1);
  }
  inlen += (size_t)n;
  size_t off = 0;
  while (inlen - off >= 4) {
    uint32_t flen = get32(inbuf + off);
    if (flen > MAX_FRAME) {
      fprintf(stderr, "sctp-udp-helper: frame of %u bytes\n", flen);
      exit(2);
    }
    if (inlen - off - 4 < flen) break;
    if (!handle_frame(inbuf + off + 4, flen)) {
      fprintf(stderr, "sctp-udp-helper: malformed frame\n");
      exit(2);
    }
    off += 4 + flen;
  }
  /* the batch points into inbuf: out before the bytes move */
  send_batch();
  memmove(inbuf, inbuf + off, inlen - off);
  inlen -= off;
}

/* One datagram read (or one segment of a coalesced read): checked, then framed to Node. */
static void deliver(struct sock *s, unsigned char *d, size_t len, const unsigned char *a,
                    size_t alen, uint16_t port) {
  if (len >= MIN_SCTP) {
    uint32_t c = sctp_crc(d, len);
    uint32_t stored =
        (uint32_t)d[8] | (uint32_t)d[9] << 8 | (uint32_t)d[10] << 16 | (uint32_t)d[11] << 24;
    if (c != stored) {
      if (s->bad++ == 0) {
        memcpy(s->bad_src, a, alen);
        s->bad_src_len = alen;
        s->bad_port = port;
        size_t h = len < 16 ? len : 16;
        put16(s->bad_head, (uint16_t)(len > 0xffff ? 0xffff : len));
        memcpy(s->bad_head + 2, d, h);
        s->bad_head_len = 2 + h;
      }
      return;
    }
  }
  unsigned char *p = frame('P', 7 + alen + len);
  put32(p, s->handle);
  put16(p + 4, port);
  p[6] = alen_byte(alen);
  memcpy(p + 7, a, alen);
  memcpy(p + 7 + alen, d, len);
  if (outlen >= OUT_FLUSH) flush_out();
}

/* The segment size of a coalesced read (its UDP_GRO cmsg), or 0. */
static size_t gro_size(struct msghdr *h) {
  for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c != NULL; c = CMSG_NXTHDR(h, c)) {
    if (c->cmsg_level == IPPROTO_UDP && c->cmsg_type == UDP_GRO &&
        c->cmsg_len >= CMSG_LEN(sizeof(int))) {
      int seg;
      memcpy(&seg, CMSG_DATA(c), sizeof seg);
      return seg > 0 ? (size_t)seg : 0;
    }
  }
  return 0;
}

static void read_udp(struct sock *s) {
  for (int round = 0; round < ROUNDS; round++) {
    for (int i = 0; i < BATCH; i++) {
      riov[i].iov_base = rbuf + (size_t)i * SLOT_BYTES;
      riov[i].iov_len = SLOT_BYTES;
      memset(&rmsgs[i].msg_hdr, 0, sizeof rmsgs[i].msg_hdr);
      rmsgs[i].msg_hdr.msg_iov = &riov[i];
      rmsgs[i].msg_hdr.msg_iovlen = 1;
      rmsgs[i].msg_hdr.msg_name = &raddrs[i];
      rmsgs[i].msg_hdr.msg_namelen = sizeof raddrs[i];
      if (use_gro) {
        rmsgs[i].msg_hdr.msg_control = rctl[i];
        rmsgs[i].msg_hdr.msg_controllen = sizeof rctl[i];
      }
    }
    int n = recvmmsg(s->fd, rmsgs, BATCH, MSG_DONTWAIT, NULL);
    if (n <= 0) break; /* EAGAIN, or an error (an ICMP report) the next read clears */
    for (int i = 0; i < n; i++) {
      unsigned char *d = rbuf + (size_t)i * SLOT_BYTES;
      size_t len = rmsgs[i].msg_len;
      unsigned char a[64];
      uint16_t port;
      size_t alen = addr_bytes(&raddrs[i], a, &port);
      if (alen == 0) continue;
      size_t seg = use_gro ? gro_size(&rmsgs[i].msg_hdr) : 0;
      if (seg == 0 || seg >= len) {
        deliver(s, d, len, a, alen, port);
        continue;
      }
      /* coalesced by GRO: the datagrams as they were sent, each seg bytes but the last */
      gro_reads++;
      for (size_t off = 0; off < len; off += seg) {
        deliver(s, d + off, len - off < seg ? len - off : seg, a, alen, port);
        gro_segments++;
      }
    }
    if (n < BATCH) break;
  }
  report_bad(s);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--no-gso") == 0) use_gso = 0;
    else if (strcmp(argv[i], "--no-gro") == 0) use_gro = 0;
    else {
      fprintf(stderr, "sctp-udp-helper: unknown option %.64s\n", argv[i]);
      return 3;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return 6; /* the parent died before the line above */
  crc_init();
#if defined(__x86_64__)
  __builtin_cpu_init();
  have_hw = __builtin_cpu_supports("sse4.2");
#endif
  rbuf = malloc((size_t)BATCH * SLOT_BYTES);
  ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 0};
  if (rbuf == NULL || ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, 0, &ev) < 0) return 4;
  uint32_t v[1] = {VERSION};
  put32(frame('H', 4), v[0]);
  flush_out();
  struct epoll_event evs[64];
  for (;;) {
    int n = epoll_wait(ep, evs, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return 5;
    }
    for (int i = 0; i < n; i++) {
      uint32_t k = evs[i].data.u32;
      if (k == 0) {
        read_stdin();
      } else if (k - 1 < (uint32_t)nsocks && socks[k - 1].fd >= 0) {
        read_udp(&socks[k - 1]);
      }
    }
    if (errors_pending) {
      errors_pending = 0;
      for (int i = 0; i < nsocks; i++)
        if (socks[i].fd >= 0) report_errors(&socks[i]);
    }
    report_gso();
    flush_out();
  }
}
