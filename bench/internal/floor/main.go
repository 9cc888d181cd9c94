// Command floor is the benchmark's C floor: a read loop written in C
// against the librdkafka that confluent-kafka-go bundles, with the replay's
// consumer properties, that reads a topic to its end marks and prints only
// the number of records it read. What a rebuild or the replay's read loop
// costs beyond it is what kmaterialize and the Go binding add; what it
// costs itself is librdkafka's and the broker's.
//
// It captures each partition's low and high watermark once
// (rd_kafka_query_watermark_offsets), assigns every non-empty partition at
// its low, and reads with rd_kafka_consume_batch_queue from one queue to
// which every partition's queue is forwarded, until each partition's
// position reached its end mark: a record at or past end-1, or a partition
// EOF at or past end (a position, never a count, as the replay judges it).
// With -per-message it reads one message per rd_kafka_consumer_poll call
// instead, as confluent-kafka-go's Poll does.
//
//	floor -brokers HOST:PORT -topic T [-X key=value]... [-per-message]
//	floor -version
//
// Errors go to stderr with exit status 1; stdout has the record count and
// nothing else.
//
// The C code below declares the few librdkafka types and functions it uses
// (their layout is librdkafka's stable public ABI) instead of including a
// copy of rdkafka.h, and links against the static librdkafka of the kafka
// package, which this package imports: no second librdkafka is linked, and
// main checks that rd_kafka_version_str() is kafka.LibraryVersion()'s.
//
// On a read_committed handle rd_kafka_query_watermark_offsets answers the
// last stable offset as the high mark; the benchmark's topics have no
// transactions, so that is the high watermark the replay captures.
package main

/*
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_topic_conf_s rd_kafka_topic_conf_t;
typedef struct rd_kafka_queue_s rd_kafka_queue_t;
typedef struct rd_kafka_topic_partition_s rd_kafka_topic_partition_t;
typedef struct rd_kafka_topic_partition_list_s rd_kafka_topic_partition_list_t;
typedef int rd_kafka_resp_err_t; // an enum in rdkafka.h: int-sized

typedef struct rd_kafka_message_s {
	rd_kafka_resp_err_t err;
	rd_kafka_topic_t *rkt;
	int32_t partition;
	void *payload;
	size_t len;
	void *key;
	size_t key_len;
	int64_t offset;
	void *_private;
} rd_kafka_message_t;

typedef struct rd_kafka_metadata_partition {
	int32_t id;
	rd_kafka_resp_err_t err;
	int32_t leader;
	int replica_cnt;
	int32_t *replicas;
	int isr_cnt;
	int32_t *isrs;
} rd_kafka_metadata_partition_t;

typedef struct rd_kafka_metadata_topic {
	char *topic;
	int partition_cnt;
	struct rd_kafka_metadata_partition *partitions;
	rd_kafka_resp_err_t err;
} rd_kafka_metadata_topic_t;

typedef struct rd_kafka_metadata {
	int broker_cnt;
	void *brokers;
	int topic_cnt;
	struct rd_kafka_metadata_topic *topics;
	int32_t orig_broker_id;
	char *orig_broker_name;
} rd_kafka_metadata_t;

enum {
	FLOOR_RD_KAFKA_CONSUMER = 1,
	FLOOR_CONF_OK = 0,
	FLOOR_ERR_PARTITION_EOF = -191,
	FLOOR_ERR_UNKNOWN_PARTITION = -190,
	FLOOR_ERR_UNKNOWN_TOPIC = -188,
	FLOOR_ERR_AUTHENTICATION = -169,
	FLOOR_ERR_FATAL = -150,
	FLOOR_ERR_AUTO_OFFSET_RESET = -140,
	FLOOR_ERR_OFFSET_OUT_OF_RANGE = 1,
	FLOOR_ERR_UNKNOWN_TOPIC_OR_PART = 3,
	FLOOR_ERR_TOPIC_AUTHORIZATION_FAILED = 29,
};

const char *rd_kafka_version_str(void);
const char *rd_kafka_err2str(rd_kafka_resp_err_t err);
rd_kafka_conf_t *rd_kafka_conf_new(void);
int rd_kafka_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *errstr, size_t errstr_size);
void rd_kafka_conf_destroy(rd_kafka_conf_t *conf);
void rd_kafka_conf_set_log_cb(rd_kafka_conf_t *conf, void (*log_cb)(const rd_kafka_t *rk, int level, const char *fac, const char *buf));
rd_kafka_t *rd_kafka_new(int type, rd_kafka_conf_t *conf, char *errstr, size_t errstr_size);
void rd_kafka_destroy(rd_kafka_t *rk);
rd_kafka_resp_err_t rd_kafka_poll_set_consumer(rd_kafka_t *rk);
rd_kafka_resp_err_t rd_kafka_consumer_close(rd_kafka_t *rk);
rd_kafka_topic_t *rd_kafka_topic_new(rd_kafka_t *rk, const char *topic, rd_kafka_topic_conf_t *conf);
void rd_kafka_topic_destroy(rd_kafka_topic_t *rkt);
rd_kafka_resp_err_t rd_kafka_metadata(rd_kafka_t *rk, int all_topics, rd_kafka_topic_t *only_rkt, const rd_kafka_metadata_t **metadatap, int timeout_ms);
void rd_kafka_metadata_destroy(const rd_kafka_metadata_t *metadata);
rd_kafka_resp_err_t rd_kafka_query_watermark_offsets(rd_kafka_t *rk, const char *topic, int32_t partition, int64_t *low, int64_t *high, int timeout_ms);
rd_kafka_topic_partition_list_t *rd_kafka_topic_partition_list_new(int size);
void rd_kafka_topic_partition_list_destroy(rd_kafka_topic_partition_list_t *rktparlist);
rd_kafka_topic_partition_t *rd_kafka_topic_partition_list_add(rd_kafka_topic_partition_list_t *rktparlist, const char *topic, int32_t partition);
rd_kafka_resp_err_t rd_kafka_topic_partition_list_set_offset(rd_kafka_topic_partition_list_t *rktparlist, const char *topic, int32_t partition, int64_t offset);
rd_kafka_resp_err_t rd_kafka_assign(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *partitions);
rd_kafka_queue_t *rd_kafka_queue_new(rd_kafka_t *rk);
rd_kafka_queue_t *rd_kafka_queue_get_partition(rd_kafka_t *rk, const char *topic, int32_t partition);
void rd_kafka_queue_forward(rd_kafka_queue_t *src, rd_kafka_queue_t *dst);
void rd_kafka_queue_destroy(rd_kafka_queue_t *rkqu);
ssize_t rd_kafka_consume_batch_queue(rd_kafka_queue_t *rkqu, int timeout_ms, rd_kafka_message_t **rkmessages, size_t rkmessages_size);
rd_kafka_message_t *rd_kafka_consumer_poll(rd_kafka_t *rk, int timeout_ms);
void rd_kafka_message_destroy(rd_kafka_message_t *rkmessage);
const char *rd_kafka_message_errstr(const rd_kafka_message_t *rkmessage);

// One assigned partition: its bounds, its position, and its queue
// (batch mode).
struct floor_part {
	int32_t id;
	int64_t low, end, pos;
	int done;
	rd_kafka_queue_t *q;
};

struct floor_state {
	struct floor_part *parts;
	struct floor_part **by_id; // index: partition id -> part
	int max_id;
	int pending;
	long long count;
	int progressed;
	rd_kafka_resp_err_t last_err; // the last transient client error
	char *errbuf;
	size_t errlen;
};

static int64_t floor_now_ms(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// floor_log keeps librdkafka's warnings and errors on stderr and drops
// its notices (syslog levels above 4), so that stderr says something only
// when something is wrong.
static void floor_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
	(void)rk;
	if (level <= 4)
		fprintf(stderr, "floor: librdkafka %s: %s\n", fac, buf);
}

static struct floor_part *floor_part_of(struct floor_state *s, int32_t id) {
	if (id < 0 || id > s->max_id)
		return NULL;
	return s->by_id[id];
}

// A client-level error (no topic) that waiting does not cure. The others
// (transport, a broker down) are retried by librdkafka, as the replay lets
// it; the stall timeout ends a read that never recovers.
static int floor_client_fatal(rd_kafka_resp_err_t err) {
	switch (err) {
	case FLOOR_ERR_FATAL:
	case FLOOR_ERR_AUTO_OFFSET_RESET:
	case FLOOR_ERR_OFFSET_OUT_OF_RANGE:
	case FLOOR_ERR_UNKNOWN_TOPIC:
	case FLOOR_ERR_UNKNOWN_PARTITION:
	case FLOOR_ERR_UNKNOWN_TOPIC_OR_PART:
	case FLOOR_ERR_TOPIC_AUTHORIZATION_FAILED:
	case FLOOR_ERR_AUTHENTICATION:
		return 1;
	}
	return 0;
}

static void floor_finish(struct floor_state *s, struct floor_part *p) {
	if (!p->done) {
		p->done = 1;
		s->pending--;
	}
}

// floor_handle applies one message; non-zero (with errbuf set) ends the
// read. from_consumer_q says it came from the consumer queue, where in
// batch mode only client events may arrive.
static int floor_handle(struct floor_state *s, rd_kafka_message_t *m, int from_consumer_q) {
	struct floor_part *p;
	if (m->err == FLOOR_ERR_PARTITION_EOF) {
		// The EOF's offset is the partition's position.
		p = floor_part_of(s, m->partition);
		if (!p || p->done)
			return 0;
		if (m->offset > p->pos) {
			p->pos = m->offset;
			s->progressed = 1;
		}
		if (m->offset >= p->end) {
			floor_finish(s, p);
			s->progressed = 1;
		}
		return 0;
	}
	if (m->err) {
		if (!m->rkt && !floor_client_fatal(m->err)) {
			s->last_err = m->err;
			return 0;
		}
		snprintf(s->errbuf, s->errlen, "partition %d at offset %lld: %s (%s)", (int)m->partition,
			 (long long)m->offset, rd_kafka_message_errstr(m), rd_kafka_err2str(m->err));
		return 1;
	}
	if (from_consumer_q) {
		// The partition queues' forwarding did not hold: the floor would
		// measure one message per call without saying so.
		snprintf(s->errbuf, s->errlen,
			 "partition %d: a record arrived on the consumer queue, not on the forwarded partition queue",
			 (int)m->partition);
		return 1;
	}
	p = floor_part_of(s, m->partition);
	if (!p || p->done || m->offset < p->pos)
		return 0; // prefetched past a finished partition's end
	s->progressed = 1;
	if (m->offset >= p->end) {
		// Past the end mark: the position crossed it (markers or gaps
		// lay between); the record is not the replay's.
		p->pos = m->offset;
		floor_finish(s, p);
		return 0;
	}
	s->count++;
	p->pos = m->offset + 1;
	if (p->pos >= p->end)
		floor_finish(s, p);
	return 0;
}

static void floor_stall(struct floor_state *s, int nparts, int stall_ms) {
	size_t n = (size_t)snprintf(s->errbuf, s->errlen, "no position moved for %d ms; unfinished (partition position/end):", stall_ms);
	for (int i = 0; i < nparts && n < s->errlen; i++) {
		struct floor_part *p = &s->parts[i];
		if (!p->done)
			n += (size_t)snprintf(s->errbuf + n, s->errlen - n, " %d %lld/%lld", (int)p->id, (long long)p->pos, (long long)p->end);
	}
	if (s->last_err && n < s->errlen)
		snprintf(s->errbuf + n, s->errlen - n, "; last client error: %s", rd_kafka_err2str(s->last_err));
}

// floor_run reads topic to its end marks with the properties keys[i]=vals[i]
// and stores the records read in *count. 0 on success; otherwise errbuf
// says why. Every message, queue and handle it made is destroyed before it
// returns.
static int floor_run(char **keys, char **vals, int nprops, const char *topic, int per_message,
		     int batch, int stall_ms, long long *count, char *errbuf, size_t errlen) {
	char errstr[512];
	rd_kafka_conf_t *conf;
	rd_kafka_t *rk = NULL;
	rd_kafka_topic_t *rkt = NULL;
	const rd_kafka_metadata_t *md = NULL;
	rd_kafka_topic_partition_list_t *list = NULL;
	rd_kafka_queue_t *q = NULL;
	rd_kafka_message_t **msgs = NULL;
	struct floor_state s;
	rd_kafka_resp_err_t err;
	int nparts = 0, assigned = 0, rc = 1;

	memset(&s, 0, sizeof s);
	s.errbuf = errbuf;
	s.errlen = errlen;

	conf = rd_kafka_conf_new();
	rd_kafka_conf_set_log_cb(conf, floor_log);
	for (int i = 0; i < nprops; i++) {
		if (rd_kafka_conf_set(conf, keys[i], vals[i], errstr, sizeof errstr) != FLOOR_CONF_OK) {
			snprintf(errbuf, errlen, "librdkafka property %s=%s: %s", keys[i], vals[i], errstr);
			rd_kafka_conf_destroy(conf);
			return 1;
		}
	}
	rk = rd_kafka_new(FLOOR_RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
	if (!rk) {
		snprintf(errbuf, errlen, "new consumer: %s", errstr);
		rd_kafka_conf_destroy(conf);
		return 1;
	}
	// conf is rk's now. Client errors come to the consumer queue, as with
	// confluent-kafka-go.
	rd_kafka_poll_set_consumer(rk);

	rkt = rd_kafka_topic_new(rk, topic, NULL);
	if (!rkt) {
		snprintf(errbuf, errlen, "topic handle %s failed", topic);
		goto out;
	}
	err = rd_kafka_metadata(rk, 0, rkt, &md, stall_ms);
	if (err) {
		snprintf(errbuf, errlen, "metadata of %s: %s", topic, rd_kafka_err2str(err));
		goto out;
	}
	if (md->topic_cnt != 1 || md->topics[0].err || md->topics[0].partition_cnt <= 0) {
		snprintf(errbuf, errlen, "metadata of %s: %s", topic,
			 md->topic_cnt != 1 ? "topic not in the answer" : md->topics[0].err ? rd_kafka_err2str(md->topics[0].err) : "no partitions");
		goto out;
	}
	nparts = md->topics[0].partition_cnt;
	s.parts = calloc((size_t)nparts, sizeof *s.parts);
	s.max_id = -1;
	for (int i = 0; i < nparts; i++) {
		s.parts[i].id = md->topics[0].partitions[i].id;
		if (s.parts[i].id > s.max_id)
			s.max_id = s.parts[i].id;
	}
	rd_kafka_metadata_destroy(md);
	md = NULL;
	s.by_id = calloc((size_t)s.max_id + 1, sizeof *s.by_id);
	for (int i = 0; i < nparts; i++)
		s.by_id[s.parts[i].id] = &s.parts[i];

	// The end marks, captured once.
	for (int i = 0; i < nparts; i++) {
		struct floor_part *p = &s.parts[i];
		err = rd_kafka_query_watermark_offsets(rk, topic, p->id, &p->low, &p->end, stall_ms);
		if (err) {
			snprintf(errbuf, errlen, "watermarks of partition %d: %s", (int)p->id, rd_kafka_err2str(err));
			goto out;
		}
		p->pos = p->low;
		if (p->low >= p->end)
			p->done = 1; // empty: complete before reading
		else
			s.pending++;
	}

	// Forward every partition's queue to ours before the assignment, so
	// that no record goes to the consumer queue first.
	q = rd_kafka_queue_new(rk);
	list = rd_kafka_topic_partition_list_new(nparts);
	for (int i = 0; i < nparts; i++) {
		struct floor_part *p = &s.parts[i];
		if (p->done)
			continue;
		if (!per_message) {
			p->q = rd_kafka_queue_get_partition(rk, topic, p->id);
			if (!p->q) {
				snprintf(errbuf, errlen, "queue of partition %d: none", (int)p->id);
				goto out;
			}
			rd_kafka_queue_forward(p->q, q);
		}
		rd_kafka_topic_partition_list_add(list, topic, p->id);
		rd_kafka_topic_partition_list_set_offset(list, topic, p->id, p->low);
	}
	if (s.pending > 0) {
		err = rd_kafka_assign(rk, list);
		if (err) {
			snprintf(errbuf, errlen, "assign: %s", rd_kafka_err2str(err));
			goto out;
		}
		assigned = 1;
	}

	msgs = calloc((size_t)batch, sizeof *msgs);
	int64_t last_progress = floor_now_ms();
	while (s.pending > 0) {
		ssize_t n;
		int failed = 0;
		s.progressed = 0;
		if (per_message) {
			// As Poll does: one call per message, 100 ms at most.
			rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
			if (m) {
				failed = floor_handle(&s, m, 0);
				rd_kafka_message_destroy(m);
			}
		} else {
			// A batch call returns once the array is full or the
			// timeout passed: 10 ms bounds the wait of a partial batch
			// (the last one) without a call per message when records
			// come slower than they are read.
			n = rd_kafka_consume_batch_queue(q, 10, msgs, (size_t)batch);
			if (n < 0) {
				snprintf(errbuf, errlen, "consume batch: failed (%zd)", n);
				goto out;
			}
			for (ssize_t j = 0; j < n; j++) {
				if (!failed)
					failed = floor_handle(&s, msgs[j], 0);
				rd_kafka_message_destroy(msgs[j]);
			}
			// Client errors arrive on the consumer queue.
			rd_kafka_message_t *m;
			while (!failed && (m = rd_kafka_consumer_poll(rk, 0)) != NULL) {
				failed = floor_handle(&s, m, 1);
				rd_kafka_message_destroy(m);
			}
		}
		if (failed)
			goto out;
		int64_t now = floor_now_ms();
		if (s.progressed)
			last_progress = now;
		else if (now - last_progress > stall_ms) {
			floor_stall(&s, nparts, stall_ms);
			goto out;
		}
	}
	*count = s.count;
	rc = 0;

out:
	free(msgs);
	if (assigned)
		rd_kafka_assign(rk, NULL); // stop fetching before the queues go
	for (int i = 0; i < nparts; i++) {
		if (s.parts[i].q) {
			rd_kafka_queue_forward(s.parts[i].q, NULL);
			rd_kafka_queue_destroy(s.parts[i].q);
		}
	}
	if (q)
		rd_kafka_queue_destroy(q);
	if (list)
		rd_kafka_topic_partition_list_destroy(list);
	if (md)
		rd_kafka_metadata_destroy(md);
	if (rkt)
		rd_kafka_topic_destroy(rkt);
	rd_kafka_consumer_close(rk);
	rd_kafka_destroy(rk);
	free(s.by_id);
	free(s.parts);
	return rc;
}
*/
import "C"

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
	"unsafe"

	// The kafka package links the bundled static librdkafka that the C
	// code above calls; LibraryVersion is what the check compares with.
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kmaterialize/kmaterialize/replay"
)

// props collects -X key=value, as kmaterialize's own -X does.
type props map[string]string

func (p props) String() string { return fmt.Sprint(map[string]string(p)) }

func (p props) Set(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", kv)
	}
	p[k] = v
	return nil
}

func main() { os.Exit(run()) }

func run() int {
	extra := props{}
	brokers := flag.String("brokers", "", "bootstrap servers")
	topic := flag.String("topic", "", "topic to read to its end marks")
	perMessage := flag.Bool("per-message", false, "read with rd_kafka_consumer_poll, one message per call, instead of rd_kafka_consume_batch_queue")
	batch := flag.Int("batch", 10000, "most messages per rd_kafka_consume_batch_queue call")
	stall := flag.Duration("stall", 30*time.Second, "fail when no position moved for this long (also bounds metadata and watermark requests)")
	version := flag.Bool("version", false, "print the linked librdkafka's version and exit")
	flag.Var(extra, "X", "librdkafka property key=value over the replay's tuned defaults (repeatable)")
	flag.Parse()

	linked := C.GoString(C.rd_kafka_version_str())
	if _, bundled := kafka.LibraryVersion(); linked != bundled {
		fmt.Fprintf(os.Stderr, "floor: the C code runs librdkafka %s, confluent-kafka-go %s: not one library\n", linked, bundled)
		return 1
	}
	if *version {
		fmt.Println("librdkafka", linked)
		return 0
	}
	if *topic == "" || *batch <= 0 || *stall <= 0 {
		fmt.Fprintln(os.Stderr, "floor: -topic is required, -batch and -stall must be positive")
		return 1
	}
	cfg, err := replay.ConsumerProperties(replay.Config{Brokers: *brokers, Topic: *topic, Props: extra})
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		return 1
	}

	keys := slices.Sorted(maps.Keys(cfg))
	ptrSize := C.size_t(unsafe.Sizeof((*C.char)(nil)))
	// The arrays live in C memory: cgo lets C keep no Go pointer, and
	// these hold C strings.
	ckeys := unsafe.Slice((**C.char)(C.calloc(C.size_t(len(keys)), ptrSize)), len(keys))
	cvals := unsafe.Slice((**C.char)(C.calloc(C.size_t(len(keys)), ptrSize)), len(keys))
	defer func() {
		for i := range keys {
			C.free(unsafe.Pointer(ckeys[i]))
			C.free(unsafe.Pointer(cvals[i]))
		}
		C.free(unsafe.Pointer(&ckeys[0]))
		C.free(unsafe.Pointer(&cvals[0]))
	}()
	for i, k := range keys {
		ckeys[i], cvals[i] = C.CString(k), C.CString(cfg[k])
	}
	ctopic := C.CString(*topic)
	defer C.free(unsafe.Pointer(ctopic))
	var errbuf [1024]C.char
	var count C.longlong
	per := C.int(0)
	if *perMessage {
		per = 1
	}
	if C.floor_run(&ckeys[0], &cvals[0], C.int(len(keys)), ctopic, per, C.int(*batch),
		C.int(stall.Milliseconds()), &count, &errbuf[0], C.size_t(len(errbuf))) != 0 {
		fmt.Fprintf(os.Stderr, "floor: %s: %s\n", *topic, C.GoString(&errbuf[0]))
		return 1
	}
	fmt.Println(int64(count))
	return 0
}
