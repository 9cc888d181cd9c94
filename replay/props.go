package replay

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// ErrBadProperty is returned (as a *PropertyError) by CheckProps when
// librdkafka rejects a property: an unknown name, a value it cannot parse,
// or a combination it refuses.
var ErrBadProperty = errors.New("librdkafka rejected a property")

// PropertyError names the property librdkafka rejected, and carries
// librdkafka's own error (a kafka.Error with code kafka.ErrInvalidArg).
// It matches ErrBadProperty.
type PropertyError struct {
	// Keys is the rejected property; several when no single one is
	// rejected alone (a combination librdkafka refuses).
	Keys []string
	Err  error
}

// Error returns e.g. `librdkafka property -X fetch.wait.max=100: No such
// configuration property: "fetch.wait.max"`.
func (e *PropertyError) Error() string {
	return fmt.Sprintf("librdkafka property -X %s: %v", strings.Join(e.Keys, " -X "), e.Err)
}

// Unwrap returns librdkafka's error.
func (e *PropertyError) Unwrap() error { return e.Err }

// Is reports whether target is ErrBadProperty.
func (e *PropertyError) Is(target error) bool { return target == ErrBadProperty }

// ClientKind is a kind of librdkafka client a command creates.
type ClientKind int

const (
	// ConsumerClient is a consumer (replay, describe, verify, the copy's
	// source side).
	ConsumerClient ClientKind = iota
	// ProducerClient is a producer (the copy's destination side).
	ProducerClient
)

// CheckProps creates, and closes at once, a client of each kind with props
// (the user's -X properties) on top of brokers, so that a property
// librdkafka rejects is a *PropertyError before any work starts, rather
// than a client error in the middle of it. Only librdkafka's verdict
// counts: its error is classified by code (kafka.ErrInvalidArg), and the
// property is named by trying each one alone. Any other error creating a
// client is returned as it is. The clients are closed before CheckProps
// returns; they join no group and produce nothing.
func CheckProps(brokers string, props map[string]string, kinds ...ClientKind) error {
	err := tryClients(brokers, props, kinds)
	var ke kafka.Error
	if err == nil || !errors.As(err, &ke) || ke.Code() != kafka.ErrInvalidArg {
		return err
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range props {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		if one := tryClients(brokers, map[string]string{k: props[k]}, kinds); one != nil {
			return &PropertyError{Keys: []string{k + "=" + props[k]}, Err: one}
		}
	}
	all := make([]string, len(keys))
	for i, k := range keys {
		all[i] = k + "=" + props[k]
	}
	return &PropertyError{Keys: all, Err: err}
}

// tryClients creates and closes one client of each kind.
func tryClients(brokers string, props map[string]string, kinds []ClientKind) error {
	for _, kind := range kinds {
		if err := tryClient(brokers, props, kind); err != nil {
			return err
		}
	}
	return nil
}

func tryClient(brokers string, props map[string]string, kind ClientKind) error {
	var cm *kafka.ConfigMap
	var err error
	if kind == ProducerClient {
		cm, err = ClientConfig(brokers, props)
	} else {
		// The replay's own consumer configuration (tuned defaults, the
		// user's properties, the fixed read-only ones), so that what
		// passes here is what the replay will create.
		cm, _, err = consumerConfig(Config{Brokers: brokers, Props: props})
	}
	if err != nil {
		return err
	}
	// librdkafka logs (for example "a consumer property ignored by this
	// producer") go to the channel and are dropped: the real clients
	// log them again.
	var drained sync.WaitGroup
	drain := func(ch chan kafka.LogEvent) {
		drained.Add(1)
		go func() {
			defer drained.Done()
			for range ch {
			}
		}()
	}
	switch kind {
	case ProducerClient:
		p, err := kafka.NewProducer(cm)
		if err != nil {
			return err
		}
		drain(p.Logs())
		p.Close()
	default:
		c, err := kafka.NewConsumer(cm)
		if err != nil {
			return err
		}
		drain(c.Logs())
		if err := closeConsumer(c); err != nil {
			drained.Wait()
			return fmt.Errorf("close the property check's consumer: %w", err)
		}
	}
	drained.Wait()
	return nil
}
