/*
 * fragprobe.c: where the kernel puts a socket write's bytes, seen from the
 * reader's copy. One thread writes a frame of F bytes, from a page-aligned
 * buffer, to each of three loopback TCP connections in turn; three reader
 * threads each read their frame whole (SO_RCVLOWAT at F, MSG_WAITALL) into
 * a page-aligned buffer at a chosen offset, and the writer starts the next
 * round once all three are read. Linux copies what a thread writes into
 * 32 KiB page fragments of that thread's, one after another, so the
 * reader's copy runs at the distance between its destination and the
 * fragment's bytes; on the AMD EPYC (Zen 4) of the README's figures that
 * copy is about three times slower when the destination lies 1 to 15
 * bytes past the source modulo 4096 (bench/repmovsb.c). A reader offset
 * that makes one connection's copy slow therefore shows where its frame
 * began in a fragment: offset 5 for the first frame of a round (a fresh
 * fragment), F mod 32768 + 5 (mod 4096) for the second if it continued the
 * first's fragment.
 *
 *   gcc -O2 -pthread -o fragprobe bench/fragprobe.c
 *   ./fragprobe F ROUNDS OFF0 OFF1 OFF2
 *   ./fragprobe 800005 600 0 0 0     # every reader at offset 0
 *   ./fragprobe 800005 600 5 0 0     # the first reader 5 bytes in
 *
 * Prints the median thread CPU time of each write and each read (the
 * readers' is their copy) and the median round, in microseconds.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NS 3

static int frame, rounds, off[NS];
static int wfd[NS], rfd[NS];
static char *rbuf[NS];
static double *wt, *rt;
static atomic_int reads_done;

static double cpu_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static double wall_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void *reader(void *arg)
{
	long i = (long)arg;
	for (int r = 0; r < rounds; r++) {
		int lowat = frame;
		if (setsockopt(rfd[i], SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat))
			die("SO_RCVLOWAT");
		double c0 = cpu_us();
		ssize_t n = recv(rfd[i], rbuf[i] + off[i], frame, MSG_WAITALL);
		if (n != frame)
			die("recv (short, or no data within 5 s)");
		rt[r * NS + i] = cpu_us() - c0;
		atomic_fetch_add(&reads_done, 1);
	}
	return NULL;
}

static void connect_pair(int i)
{
	int size = 4 << 20, one = 1;
	struct timeval tmo = {.tv_sec = 5};
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof a;
	int l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (void *)&a, sizeof a) || getsockname(l, (void *)&a, &alen) || listen(l, 1))
		die("listen");
	int c = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(c, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (connect(c, (void *)&a, sizeof a))
		die("connect");
	int s = accept(l, NULL, NULL);
	if (s < 0)
		die("accept");
	setsockopt(s, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tmo, sizeof tmo);
	close(l);
	wfd[i] = c;
	rfd[i] = s;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(const double *v, int stride, int first)
{
	double *x = malloc(sizeof(double) * rounds);
	for (int r = 0; r < rounds; r++)
		x[r] = v[r * stride + first];
	qsort(x, rounds, sizeof(double), cmp);
	double m = x[rounds / 2];
	free(x);
	return m;
}

int main(int argc, char **argv)
{
	if (argc != 3 + NS) {
		fprintf(stderr, "usage: %s F ROUNDS OFF0 OFF1 OFF2\n", argv[0]);
		return 2;
	}
	frame = atoi(argv[1]);
	rounds = atoi(argv[2]);
	for (int i = 0; i < NS; i++)
		off[i] = atoi(argv[3 + i]) & 4095;
	if (frame <= 0 || rounds <= 0) {
		fprintf(stderr, "F and ROUNDS must be positive\n");
		return 2;
	}
	char *src;
	if (posix_memalign((void **)&src, 4096, frame))
		die("posix_memalign");
	memset(src, 1, frame);
	for (int i = 0; i < NS; i++) {
		connect_pair(i);
		if (posix_memalign((void **)&rbuf[i], 4096, frame + 4096))
			die("posix_memalign");
		memset(rbuf[i], 0, frame + 4096);
	}
	wt = malloc(sizeof(double) * rounds * NS);
	rt = malloc(sizeof(double) * rounds * NS);
	double *round = malloc(sizeof(double) * rounds);
	pthread_t th[NS];
	for (long i = 0; i < NS; i++)
		pthread_create(&th[i], NULL, reader, (void *)i);
	for (int r = 0; r < rounds; r++) {
		double t0 = wall_us();
		for (int i = 0; i < NS; i++) {
			double c0 = cpu_us();
			for (size_t done = 0; done < (size_t)frame;) {
				ssize_t k = write(wfd[i], src + done, frame - done);
				if (k <= 0)
					die("write");
				done += k;
			}
			wt[r * NS + i] = cpu_us() - c0;
		}
		while (atomic_load(&reads_done) < (r + 1) * NS)
			;
		round[r] = wall_us() - t0;
	}
	for (int i = 0; i < NS; i++)
		printf("write%d %.1f  ", i, median(wt, NS, i));
	for (int i = 0; i < NS; i++)
		printf("read%d %.1f  ", i, median(rt, NS, i));
	printf("round %.1f\n", median(round, 1, 0));
	return 0;
}
