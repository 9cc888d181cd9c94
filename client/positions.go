package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/kmaterialize/kmaterialize/api"
)

// Positions are a table's positions in its topic: per partition, the next
// offset it would apply (a record at offset O is in the table once its
// partition's position is at least O+1).
type Positions = api.Positions

// ReadInfo is what a read answer was read at, all from its one read
// transaction.
type ReadInfo struct {
	// Generation is the published generation that answered (0: unsaid).
	Generation uint64
	// Positions are the table's positions in that answer; nil when the
	// daemon left them out (longer than 4 KiB: Table has them) or the
	// table has none.
	Positions Positions
	// Cursor is the answer's Kmaterialize-Cursor, opaque: what a change
	// feed resumes from ("" when left out).
	Cursor string
}

// readInfo reads an answer's Kmaterialize-Generation, -Positions and
// -Cursor; a header that does not parse is left zero.
func readInfo(resp *http.Response) ReadInfo {
	var ri ReadInfo
	ri.Generation, _ = generation(resp)
	if s := resp.Header.Get(HeaderPositions); s != "" {
		if p, err := api.ParsePositions(s); err == nil {
			ri.Positions = p
		}
	}
	ri.Cursor = resp.Header.Get(HeaderCursor)
	return ri
}

// GetOptions ask a read to wait for the table to reach positions: read
// your own writes. The zero value reads at once.
type GetOptions struct {
	// MinPositions are the positions the table must have applied before
	// the read answers, in position units (offset + 1: see
	// MinPositionsFromDelivery). Every partition must be one of the
	// table's (else an *Error of CodeBadPositions). nil: any.
	MinPositions map[int32]int64
	// Wait is how long the daemon waits for MinPositions (at most
	// api.MaxWait, 30s): past it the read fails with a
	// *PositionsNotReachedError. 0 answers at once.
	Wait time.Duration
}

// validate refuses what the daemon would.
func (o GetOptions) validate() error {
	if o.Wait < 0 || o.Wait > api.MaxWait {
		return fmt.Errorf("GetOptions.Wait %s: want 0 to %s", o.Wait, api.MaxWait)
	}
	if o.Wait > 0 && len(o.MinPositions) == 0 {
		return errors.New("GetOptions.Wait without MinPositions: a read waits only for positions")
	}
	for p, n := range o.MinPositions {
		if p < 0 || n < 0 {
			return fmt.Errorf("GetOptions.MinPositions %d:%d: partitions and positions are not negative", p, n)
		}
	}
	return nil
}

// maxQueryPositions is the longest min_positions sent in a query; a
// longer one goes as a POST body.
const maxQueryPositions = 2 << 10

// request returns the method, the query additions and the body of a read
// with o: a GET with min_positions= and wait=, or for many positions a
// POST with an api.MinPositionsBody.
func (o GetOptions) request(q url.Values) (method string, body []byte, err error) {
	if err := o.validate(); err != nil {
		return "", nil, err
	}
	if len(o.MinPositions) == 0 {
		return http.MethodGet, nil, nil
	}
	if o.Wait > 0 {
		q.Set(api.ParamWait, o.Wait.String())
	}
	text := Positions(o.MinPositions).String()
	if len(text) <= maxQueryPositions {
		q.Set(api.ParamMinPositions, text)
		return http.MethodGet, nil, nil
	}
	body, err = json.Marshal(api.MinPositionsBody{MinPositions: o.MinPositions})
	return http.MethodPost, body, err
}

// Delivery is one record's delivery report: the partition and offset
// the producer was told.
type Delivery struct {
	Partition int32
	Offset    int64
}

// MinPositionsFromDelivery returns the GetOptions.MinPositions that a read
// must wait for to see the delivered records: per partition, the highest
// delivered offset plus one (positions count records, offsets number
// them: a table at position O has applied offsets below O only).
func MinPositionsFromDelivery(delivered ...Delivery) map[int32]int64 {
	out := make(map[int32]int64, len(delivered))
	for _, d := range delivered {
		if n, ok := out[d.Partition]; !ok || d.Offset+1 > n {
			out[d.Partition] = d.Offset + 1
		}
	}
	return out
}

// MinPositionsFromOffsets is MinPositionsFromDelivery of a map from
// partition to the highest offset delivered there.
func MinPositionsFromOffsets(offsets map[int32]int64) map[int32]int64 {
	out := make(map[int32]int64, len(offsets))
	for p, off := range offsets {
		out[p] = off + 1
	}
	return out
}

// PositionsNotReachedError is a read whose GetOptions.Wait passed before
// the table reached GetOptions.MinPositions (409
// positions_not_reached). It unwraps to the *Error.
type PositionsNotReachedError struct {
	// Min is what the read asked for.
	Min Positions
	// Positions are the table's positions when the daemon gave up.
	Positions Positions
	Err       *Error
}

func (e *PositionsNotReachedError) Error() string {
	return fmt.Sprintf("%v (asked for %s, the table is at %s)", e.Err, e.Min, e.Positions)
}

func (e *PositionsNotReachedError) Unwrap() error { return e.Err }

// positionsError turns a 409 positions_not_reached into a
// *PositionsNotReachedError.
func positionsError(err error, min map[int32]int64) error {
	var e *Error
	if errors.As(err, &e) && e.Code == CodePositionsNotReached {
		return &PositionsNotReachedError{Min: Positions(min).Clone(), Positions: e.Read.Positions, Err: e}
	}
	return err
}

// Value is the answer of GetWith.
type Value struct {
	Value []byte
	ReadInfo
}

// GetWith is Get with options: with o.MinPositions it answers only once
// the table has applied them (or fails with a *PositionsNotReachedError
// after o.Wait). The answer, and an *Error of CodeKeyNotFound, carry what
// they were read at (Value.ReadInfo, Error.Read).
func (c *Client) GetWith(ctx context.Context, table string, key []byte, o GetOptions) (Value, error) {
	path := tablePath(table, "/keys/"+escapeSegment(string(key)))
	q := url.Values{}
	method, body, err := o.request(q)
	if err != nil {
		return Value{}, err
	}
	resp, err := c.doBody(ctx, method, path, q, body)
	if err != nil {
		return Value{}, positionsError(err, o.MinPositions)
	}
	defer resp.Body.Close()
	if _, err := generation(resp); err != nil {
		return Value{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	v := Value{ReadInfo: readInfo(resp)}
	if v.Value, err = io.ReadAll(resp.Body); err != nil {
		return Value{}, fmt.Errorf("%s %s: read the value: %w", method, path, err)
	}
	return v, nil
}
