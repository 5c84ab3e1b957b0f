package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// benchBody is benchmarks/peers' body: sequence number and send time (ns, little-endian), padded to 1 KiB,
// so the Python consumers and the driver read the Go producer's messages like their own.
func benchBody(seq int, pad []byte) []byte {
	body := make([]byte, 16+len(pad))
	binary.LittleEndian.PutUint64(body[0:], uint64(seq))
	binary.LittleEndian.PutUint64(body[8:], uint64(time.Now().UnixNano()))
	copy(body[16:], pad)
	return body
}

// bench is W1 of benchmarks/peers: --count messages by SendAsync with at most --window unanswered, for at
// most --cap seconds, then one JSON line with the fields of the Python producers' result.
func bench(o options) int {
	p, err := rocketmq.NewProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver([]string{o.namesrv})),
		producer.WithGroupName(o.group),
		producer.WithRetry(2),
		producer.WithSendMsgTimeout(10*time.Second),
	)
	if err != nil {
		fail("producer: %v", err)
	}
	if err := p.Start(); err != nil {
		fail("producer start: %v", err)
	}
	defer p.Shutdown()
	pad := make([]byte, 1024-16)
	rand.Read(pad)
	var acked, failed int64
	var firstErr atomic.Value
	note := func(e string) { firstErr.CompareAndSwap(nil, e) }
	window := make(chan struct{}, o.window)
	var wg sync.WaitGroup
	ctx := context.Background()
	issued, capped := 0, false
	firstNs := time.Now().UnixNano()
	start := time.Now()
	for i := 0; i < o.count; i++ {
		if time.Since(start).Seconds() >= o.cap {
			capped = true
			break
		}
		window <- struct{}{}
		wg.Add(1)
		issued++
		done := func(_ context.Context, r *primitive.SendResult, err error) {
			if err == nil && r.Status == primitive.SendOK {
				atomic.AddInt64(&acked, 1)
			} else {
				atomic.AddInt64(&failed, 1)
				if err != nil {
					note(err.Error())
				} else {
					note("send status " + r.String())
				}
			}
			<-window
			wg.Done()
		}
		if err := p.SendAsync(ctx, done, primitive.NewMessage(o.topic, benchBody(i, pad))); err != nil {
			done(ctx, nil, err)
		}
	}
	wg.Wait()
	seconds := time.Since(start).Seconds()
	first, _ := firstErr.Load().(string)
	var firstError interface{}
	if first != "" {
		firstError = first
	}
	emit(map[string]interface{}{
		"window": o.window, "issued": issued, "acked": acked, "failed": failed, "first_error": firstError,
		"capped": capped, "first_sent_ns": firstNs, "seconds": seconds,
	})
	return 0
}
