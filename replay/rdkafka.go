package replay

// This file is the replay's one crossing into librdkafka below
// confluent-kafka-go: the few prototypes and the message struct it uses are
// declared here (no header is copied) and resolve against the librdkafka
// that confluent-kafka-go links (its bundled static library), so no second
// librdkafka is linked. TestBatchLinksBundledLibrdkafka holds the two
// versions equal.
//
// What it does there is in batch.go: records in batches, across the cgo
// boundary once per batch.

/*
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_queue_s rd_kafka_queue_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_headers_s rd_kafka_headers_t;

// rd_kafka_message_t as rdkafka.h (v2.11.1) declares it; the enum
// rd_kafka_resp_err_t is an int.
typedef struct rd_kafka_message_s {
	int err;
	rd_kafka_topic_t *rkt;
	int32_t partition;
	void *payload;
	size_t len;
	void *key;
	size_t key_len;
	int64_t offset;
	void *_private;
} rd_kafka_message_t;

extern int rd_kafka_version(void);
extern const char *rd_kafka_name(const rd_kafka_t *rk);
extern int rd_kafka_type(const rd_kafka_t *rk);
extern rd_kafka_queue_t *rd_kafka_queue_new(rd_kafka_t *rk);
extern void rd_kafka_queue_destroy(rd_kafka_queue_t *rkqu);
extern rd_kafka_queue_t *rd_kafka_queue_get_partition(rd_kafka_t *rk, const char *topic, int32_t partition);
extern void rd_kafka_queue_forward(rd_kafka_queue_t *src, rd_kafka_queue_t *dst);
extern void rd_kafka_queue_yield(rd_kafka_queue_t *rkqu);
extern ssize_t rd_kafka_consume_batch_queue(rd_kafka_queue_t *rkqu, int timeout_ms, rd_kafka_message_t **rkmessages, size_t rkmessages_size);
extern void rd_kafka_message_destroy(rd_kafka_message_t *rkmessage);
extern int64_t rd_kafka_message_timestamp(const rd_kafka_message_t *rkmessage, int *tstype);
extern int rd_kafka_message_headers(const rd_kafka_message_t *rkmessage, rd_kafka_headers_t **hdrsp);
extern size_t rd_kafka_header_cnt(const rd_kafka_headers_t *hdrs);
extern int rd_kafka_header_get_all(const rd_kafka_headers_t *hdrs, size_t idx, const char **namep, const void **valuep, size_t *sizep);

#define KMZ_CONSUMER 1

// kmz_rec is one message of a batch: a record (err 0), a partition EOF or
// an error (its text as the value). Lengths of -1 are NULL (no key, no
// value); offsets index the batch's arena.
typedef struct {
	int32_t err;
	int32_t partition;
	int64_t offset;
	int64_t ts;
	int32_t key_len;
	int32_t val_len;
	uint64_t key_off;
	uint64_t val_off;
	uint32_t hdr_first;
	uint32_t hdr_n;
} kmz_rec;

typedef struct {
	uint64_t key_off;
	uint64_t val_off;
	int32_t key_len;
	int32_t val_len;
} kmz_hdr;

// kmz_src is the replay's queue and the messages consumed from it that
// are not copied out yet.
typedef struct {
	rd_kafka_t *rk;
	rd_kafka_queue_t *q;
	rd_kafka_message_t **msgs;
	size_t cap, n, next;
} kmz_src;

static kmz_src *kmz_src_new(rd_kafka_t *rk, size_t cap) {
	kmz_src *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->msgs = calloc(cap, sizeof(*s->msgs));
	s->q = rd_kafka_queue_new(rk);
	if (!s->msgs || !s->q) {
		if (s->q)
			rd_kafka_queue_destroy(s->q);
		free(s->msgs);
		free(s);
		return NULL;
	}
	s->rk = rk;
	s->cap = cap;
	return s;
}

// kmz_src_forward forwards (on) or stops forwarding (!on) a partition's
// fetch queue to the replay's queue: 0 when done.
static int kmz_src_forward(kmz_src *s, const char *topic, int32_t partition, int on) {
	rd_kafka_queue_t *pq = rd_kafka_queue_get_partition(s->rk, topic, partition);
	if (!pq)
		return -1;
	rd_kafka_queue_forward(pq, on ? s->q : NULL);
	rd_kafka_queue_destroy(pq);
	return 0;
}

// kmz_src_destroy destroys the messages not copied out and the queue.
static void kmz_src_destroy(kmz_src *s) {
	for (size_t i = s->next; i < s->n; i++)
		rd_kafka_message_destroy(s->msgs[i]);
	rd_kafka_queue_destroy(s->q);
	free(s->msgs);
	free(s);
}

static size_t kmz_len(const void *p, size_t n) { return p ? n : 0; }

// kmz_msg_size is the arena bytes and headers message m takes.
static size_t kmz_msg_size(rd_kafka_message_t *m, int want_hdrs, size_t *nh) {
	size_t sz = kmz_len(m->payload, m->len);
	rd_kafka_headers_t *hs = NULL;
	*nh = 0;
	if (m->err != 0)
		return sz;
	sz += kmz_len(m->key, m->key_len);
	if (want_hdrs && rd_kafka_message_headers(m, &hs) == 0 && hs) {
		size_t n = rd_kafka_header_cnt(hs);
		for (size_t j = 0; j < n; j++) {
			const char *name;
			const void *val;
			size_t vs;
			if (rd_kafka_header_get_all(hs, j, &name, &val, &vs) == 0) {
				sz += strlen(name) + kmz_len(val, vs);
				(*nh)++;
			}
		}
	}
	return sz;
}

// kmz_take readies the next messages to copy: when none is pending it
// consumes what the queue holds; if that is nothing, it waits up to
// timeout_ms for one message, then takes what else is queued without
// waiting (rd_kafka_consume_batch_queue waits out its whole timeout for a
// full batch). Of the pending messages it counts as many as max_msgs
// allows and max_bytes holds (at least one, so that a message larger than
// the budget still passes), with the arena bytes and headers they need.
// It returns that count, or -1 when the consume failed.
static int kmz_take(kmz_src *s, int timeout_ms, int want_hdrs, int max_msgs,
		size_t max_bytes, size_t *bytes, size_t *nhdrs) {
	*bytes = 0;
	*nhdrs = 0;
	if (s->next >= s->n) {
		size_t want = s->cap < (size_t)max_msgs ? s->cap : (size_t)max_msgs;
		ssize_t got = rd_kafka_consume_batch_queue(s->q, 0, s->msgs, want);
		if (got == 0 && timeout_ms > 0) {
			got = rd_kafka_consume_batch_queue(s->q, timeout_ms, s->msgs, 1);
			if (got == 1 && want > 1) {
				ssize_t more = rd_kafka_consume_batch_queue(s->q, 0, s->msgs + 1, want - 1);
				if (more > 0)
					got += more;
			}
		}
		s->n = s->next = 0;
		if (got < 0)
			return -1;
		s->n = (size_t)got;
	}
	int n = 0;
	for (size_t i = s->next; i < s->n && n < max_msgs; i++) {
		size_t nh, sz = kmz_msg_size(s->msgs[i], want_hdrs, &nh);
		if (n > 0 && *bytes + sz > max_bytes)
			break;
		*bytes += sz;
		*nhdrs += nh;
		n++;
	}
	return n;
}

// kmz_copy copies the next n pending messages (as kmz_take counted them)
// into recs, hdrs and the arena, and destroys them.
static void kmz_copy(kmz_src *s, int n, int want_hdrs, kmz_rec *recs, kmz_hdr *hdrs, char *arena) {
	size_t u = 0;
	uint32_t h = 0;
	for (int i = 0; i < n; i++) {
		rd_kafka_message_t *m = s->msgs[s->next++];
		kmz_rec *r = &recs[i];
		r->err = m->err;
		r->partition = m->partition;
		r->offset = m->offset;
		r->ts = -1;
		r->key_len = -1;
		r->val_len = -1;
		r->key_off = r->val_off = u;
		r->hdr_first = h;
		r->hdr_n = 0;
		if (m->payload) {
			memcpy(arena + u, m->payload, m->len);
			r->val_off = u;
			r->val_len = (int32_t)m->len;
			u += m->len;
		}
		if (m->err == 0) {
			int tstype;
			rd_kafka_headers_t *hs = NULL;
			r->ts = rd_kafka_message_timestamp(m, &tstype);
			if (m->key) {
				memcpy(arena + u, m->key, m->key_len);
				r->key_off = u;
				r->key_len = (int32_t)m->key_len;
				u += m->key_len;
			}
			if (want_hdrs && rd_kafka_message_headers(m, &hs) == 0 && hs) {
				size_t nh = rd_kafka_header_cnt(hs);
				for (size_t j = 0; j < nh; j++) {
					const char *name;
					const void *val;
					size_t vs, kl;
					if (rd_kafka_header_get_all(hs, j, &name, &val, &vs) != 0)
						continue;
					kmz_hdr *hd = &hdrs[h++];
					kl = strlen(name);
					memcpy(arena + u, name, kl);
					hd->key_off = u;
					hd->key_len = (int32_t)kl;
					u += kl;
					hd->val_off = u;
					hd->val_len = -1;
					if (val) {
						memcpy(arena + u, val, vs);
						hd->val_len = (int32_t)vs;
						u += vs;
					}
					r->hdr_n++;
				}
			}
		}
		rd_kafka_message_destroy(m);
	}
}
*/
import "C"

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"
	"unsafe"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/kmaterialize/kmaterialize/record"
)

// rdkVersion is the version of the librdkafka this package's preamble
// links, as rd_kafka_version reports it (0x020b01ff for 2.11.1).
func rdkVersion() int { return int(C.rd_kafka_version()) }

// consumerHandle is the rd_kafka_t of a confluent-kafka-go consumer, read
// through reflection: confluent-kafka-go exports no access to it.
//
// Why reflection and not a handle of the replay's own: the consumer's
// handle is the one whose configuration confluent-kafka-go validated, whose
// logs it forwards to the Logs channel, whose errors, statistics and
// OAUTHBEARER refreshes its Poll serves, and that Assign, Pause,
// IncrementalAssign, the admin client made from the consumer and Close act
// on. A second handle made through the C API would need each of those
// plumbed again in C, and would be a second connection to every broker.
// What reflection costs is a dependency on two unexported field names
// (Consumer.handle, handle.rk): TestConsumerHandle fails loudly when an
// upgrade renames them, and consumerHandle itself refuses a handle that is
// not this consumer's (its name and type are checked through the C API).
func consumerHandle(c *kafka.Consumer) (*C.rd_kafka_t, error) {
	_, h, err := consumerFields(c)
	if err != nil {
		return nil, err
	}
	rk := h.FieldByName("rk")
	if !rk.IsValid() || rk.Kind() != reflect.Pointer || rk.IsNil() {
		return nil, errors.New("confluent-kafka-go's consumer handle has no field rk: the batch reader does not know this version of confluent-kafka-go")
	}
	p := (*C.rd_kafka_t)(rk.UnsafePointer())
	if C.rd_kafka_type(p) != C.KMZ_CONSUMER || C.GoString(C.rd_kafka_name(p)) != c.String() {
		return nil, fmt.Errorf("the handle read from confluent-kafka-go's consumer is not %s's", c.String())
	}
	return p, nil
}

// closeConsumer is c.Close without the wait that Close has for
// confluent-kafka-go's log goroutine. Close stops that goroutine by
// closing a channel it only looks at between polls of the handle's log
// queue, each up to 100 ms long, so every Close waited out the rest of
// one: 100 ms a consumer (measured: 100.3 to 100.6 ms a Close, 1.1 ms
// without the logs channel), 200 ms of a two-reader replay that reads a
// 1M-record topic in 400. closeConsumer wakes that poll with
// rd_kafka_queue_yield once Close has closed the channel. It holds Close
// at its wait for the goroutine (one more count on the handle's WaitGroup)
// until the yield is done, because Close destroys the log queue right
// after that wait.
//
// This reads three more unexported fields (handle.logq, handle.waitGroup,
// Consumer.readerTermChan), pinned by TestConsumerHandle as the handle's
// rk is; where they are not what this version has, it is c.Close. It is
// called once per consumer, by its owner (clients.Close).
func closeConsumer(c *kafka.Consumer) error {
	w, ok := logWakerOf(c)
	if !ok {
		return c.Close()
	}
	select {
	case <-w.term: // closing or closed already: its log queue may be gone
		return c.Close()
	default:
	}
	w.wg.Add(1)
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case <-w.term:
		C.rd_kafka_queue_yield(w.logq)
		w.wg.Done()
		return <-closed
	case err := <-closed: // refused before it began (closed already)
		w.wg.Done()
		return err
	}
}

// logWaker is what closeConsumer needs of a consumer's insides: its log
// queue, the WaitGroup Close waits on before destroying it, and the
// channel Close closes first.
type logWaker struct {
	logq *C.rd_kafka_queue_t
	wg   *sync.WaitGroup
	term <-chan bool
}

// logWakerOf reads c's log queue, WaitGroup and termination channel through
// reflection; ok is false where c has no log queue or the fields are not
// what confluent-kafka-go v2.11.1 has.
func logWakerOf(c *kafka.Consumer) (w logWaker, ok bool) {
	v, h, err := consumerFields(c)
	if err != nil {
		return w, false
	}
	logq, wg := h.FieldByName("logq"), h.FieldByName("waitGroup")
	term := v.FieldByName("readerTermChan")
	if !logq.IsValid() || logq.Kind() != reflect.Pointer || logq.IsNil() ||
		!wg.IsValid() || wg.Type() != reflect.TypeFor[sync.WaitGroup]() || !wg.CanAddr() ||
		!term.IsValid() || term.Type() != reflect.TypeFor[chan bool]() || !term.CanAddr() {
		return w, false
	}
	w.logq = (*C.rd_kafka_queue_t)(logq.UnsafePointer())
	w.wg = (*sync.WaitGroup)(unsafe.Pointer(wg.UnsafeAddr()))
	w.term = *(*chan bool)(unsafe.Pointer(term.UnsafeAddr()))
	return w, w.term != nil
}

// consumerFields is the Consumer struct behind c and its handle field,
// through reflection (consumerHandle says why).
func consumerFields(c *kafka.Consumer) (consumer, handle reflect.Value, err error) {
	v := reflect.ValueOf(c)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return v, v, errors.New("no consumer")
	}
	h := v.Elem().FieldByName("handle")
	if !h.IsValid() || h.Kind() != reflect.Struct {
		return v, h, errors.New("confluent-kafka-go's Consumer has no field handle: the batch reader does not know this version of confluent-kafka-go")
	}
	return v.Elem(), h, nil
}

// batchQueue is the replay's own librdkafka queue: the fetch queues of the
// partitions it reads are forwarded to it, away from the consumer queue
// that Poll serves, and it is consumed in batches. After take, the batch's
// messages are recs[:n], their bytes in arena. It is owned by its read loop.
type batchQueue struct {
	src     *C.kmz_src
	topic   *C.char
	headers bool
	// forwarded are the partitions whose fetch queues go to src's queue.
	forwarded []int32

	recs  []C.kmz_rec
	hdrs  []C.kmz_hdr
	arena []byte
	// rhdrs are the batch's records' headers, each record's a sub-slice.
	rhdrs []record.Header
}

// batchMessages is the most messages one take consumes from librdkafka.
const batchMessages = 4096

// newBatchQueue makes the replay's queue on consumer c's handle, for
// topic's partitions, copying headers when asked for.
func newBatchQueue(c *kafka.Consumer, topic string, headers bool) (*batchQueue, error) {
	rk, err := consumerHandle(c)
	if err != nil {
		return nil, err
	}
	src := C.kmz_src_new(rk, C.size_t(batchMessages))
	if src == nil {
		return nil, errors.New("librdkafka: could not create the replay's queue")
	}
	return &batchQueue{src: src, topic: C.CString(topic), headers: headers,
		recs: make([]C.kmz_rec, batchMessages)}, nil
}

// forward forwards partitions' fetch queues to the replay's queue. Set
// before the partitions are assigned: a forward the application set
// survives the assignment's fetch start (librdkafka's
// RD_KAFKA_Q_F_FWD_APP), and nothing is fetched into the consumer queue
// before it.
func (q *batchQueue) forward(parts []int32) error {
	for _, p := range parts {
		if C.kmz_src_forward(q.src, q.topic, C.int32_t(p), 1) != 0 {
			return fmt.Errorf("librdkafka: no queue for partition %d", p)
		}
		q.forwarded = append(q.forwarded, p)
	}
	return nil
}

// close stops forwarding the partitions' queues and destroys the replay's
// queue with the messages not copied out, so that the consumer's Close
// finds no message or queue of its handle still held.
func (q *batchQueue) close() {
	if q.src == nil {
		return
	}
	for _, p := range q.forwarded {
		C.kmz_src_forward(q.src, q.topic, C.int32_t(p), 0)
	}
	C.kmz_src_destroy(q.src)
	C.free(unsafe.Pointer(q.topic))
	q.src, q.topic = nil, nil
}

// take copies the next messages of the queue, at most maxMsgs and (past
// the first) maxBytes of keys, values and headers, into a new arena of
// exactly their size, waiting up to timeoutMs for the first: one cgo
// crossing to count them and one to copy them, whatever their number. It
// returns how many it took.
func (q *batchQueue) take(timeoutMs, maxMsgs int, maxBytes int64) (int, error) {
	var bytes, nhdrs C.size_t
	want := 0
	if q.headers {
		want = 1
	}
	maxMsgs = min(max(maxMsgs, 1), len(q.recs))
	maxBytes = max(maxBytes, 1)
	n := int(C.kmz_take(q.src, C.int(timeoutMs), C.int(want), C.int(maxMsgs), C.size_t(maxBytes), &bytes, &nhdrs))
	if n < 0 {
		return 0, errors.New("librdkafka: consuming a batch from the replay's queue failed")
	}
	if n == 0 {
		return 0, nil
	}
	// One allocation for the batch's bytes (no pointers in it, so the
	// collector never scans it) and one for its headers: the records'
	// slices point into them, and they live as long as a record does.
	q.arena = make([]byte, max(int(bytes), 1))
	if int(nhdrs) > len(q.hdrs) {
		q.hdrs = make([]C.kmz_hdr, int(nhdrs))
	}
	q.rhdrs = nil
	if nhdrs > 0 {
		q.rhdrs = make([]record.Header, int(nhdrs))
	}
	var hp *C.kmz_hdr
	if len(q.hdrs) > 0 {
		hp = &q.hdrs[0]
	}
	C.kmz_copy(q.src, C.int(n), C.int(want), &q.recs[0], hp, (*C.char)(unsafe.Pointer(&q.arena[0])))
	return n, nil
}

// message is what message i of the batch is: a record (code 0), a
// partition EOF (kafka.ErrPartitionEOF) or an error, with its partition
// and offset.
func (q *batchQueue) message(i int) (code kafka.ErrorCode, partition int32, offset int64) {
	m := &q.recs[i]
	return kafka.ErrorCode(m.err), int32(m.partition), int64(m.offset)
}

// errorOf is message i's error, as confluent-kafka-go's Poll would have
// made it: the code, and librdkafka's text for it.
func (q *batchQueue) errorOf(i int) kafka.Error {
	m := &q.recs[i]
	text := ""
	if m.val_len > 0 {
		text = string(q.arena[m.val_off : int(m.val_off)+int(m.val_len)])
	}
	return kafka.NewError(kafka.ErrorCode(m.err), text, false)
}

// record is message i as a Record, its bytes slices of the batch's arena
// (a NULL key or value is nil, an empty one empty, as confluent-kafka-go
// makes them), headers only when asked for.
func (q *batchQueue) record(i int) record.Record {
	m := &q.recs[i]
	r := record.Record{Partition: int32(m.partition), Offset: int64(m.offset)}
	if ts := int64(m.ts); ts != -1 {
		r.Timestamp = time.Unix(ts/1000, (ts%1000)*1000000)
	}
	r.Key = q.slice(m.key_off, m.key_len)
	r.Value = q.slice(m.val_off, m.val_len)
	if m.hdr_n > 0 {
		first, n := int(m.hdr_first), int(m.hdr_n)
		hs := q.rhdrs[first : first+n : first+n]
		for j := range hs {
			h := &q.hdrs[first+j]
			k := q.slice(h.key_off, h.key_len)
			// The arena is never written again: a string over its
			// bytes is as immutable as one copied.
			hs[j] = record.Header{Key: unsafe.String(unsafe.SliceData(k), len(k)), Value: q.slice(h.val_off, h.val_len)}
		}
		r.Headers = hs
	}
	return r
}

// slice is the arena's bytes at off, nil for a length of -1 (NULL).
func (q *batchQueue) slice(off C.uint64_t, n C.int32_t) []byte {
	if n < 0 {
		return nil
	}
	o := int(off)
	return q.arena[o : o+int(n) : o+int(n)]
}
