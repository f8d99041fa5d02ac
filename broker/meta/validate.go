package meta

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"
)

// Validation of a namespace's policies, as Pulsar validates them: what
// Pulsar refuses is refused with its status and its message (412 for a
// message TTL, 400 for retention and persistence, as Pulsar's
// AdminResource.checkArgument), and what Meridian could not apply is
// refused too, before it is stored: a value that is stored and then fails
// every topic load of the namespace (a retention of max int64 minutes
// overflows time.Duration) is refused here, never discovered there.

// MaxRetentionMinutes is the longest retention by time: the most minutes
// a time.Duration holds (about 292 years).
const MaxRetentionMinutes = math.MaxInt64 / int64(time.Minute)

// MaxRetentionSizeMB is the largest retention by size: the most MB whose
// byte count an int64 holds.
const MaxRetentionSizeMB = math.MaxInt64 >> 20

// MaxMessageTTLSeconds is the longest message TTL: Pulsar's field is a
// Java int.
const MaxMessageTTLSeconds = math.MaxInt32

// ValidateRetention checks a retention policy: each limit -1 (none), 0 or
// positive, both 0 (retention off) or both non-zero, and within what a
// duration and a byte count hold. Errors are HTTP 400.
func ValidateRetention(r Retention) error {
	bad := func(msg string) error { return BadRequest(errors.New(msg)) }
	switch {
	case r.RetentionSizeInMB < -1:
		return bad("Invalid retention policy: size limit must be >= -1")
	case r.RetentionTimeInMinutes < -1:
		return bad("Invalid retention policy: time limit must be >= -1")
	case (r.RetentionTimeInMinutes == 0) != (r.RetentionSizeInMB == 0):
		return bad("Invalid retention policy: Setting a single time or size limit to 0 is invalid when one of the limits has a non-zero value. Use the value of -1 instead of 0 to ignore a specific limit. To disable retention both limits must be set to 0.")
	case int64(r.RetentionTimeInMinutes) > MaxRetentionMinutes:
		return bad(fmt.Sprintf("Invalid retention policy: time limit %d minutes: at most %d (or -1 for no limit)", r.RetentionTimeInMinutes, MaxRetentionMinutes))
	case r.RetentionSizeInMB > MaxRetentionSizeMB:
		return bad(fmt.Sprintf("Invalid retention policy: size limit %d MB: at most %d (or -1 for no limit)", r.RetentionSizeInMB, MaxRetentionSizeMB))
	}
	return nil
}

// ValidateMessageTTL checks a message TTL in seconds: 0 (none) to
// MaxMessageTTLSeconds. Errors are HTTP 412, as Pulsar's.
func ValidateMessageTTL(seconds int) error {
	if seconds < 0 {
		return StatusError{Status: http.StatusPreconditionFailed, Err: errors.New("Invalid value for message TTL, message TTL must >= 0")}
	}
	if seconds > MaxMessageTTLSeconds {
		return StatusError{Status: http.StatusPreconditionFailed, Err: fmt.Errorf("Invalid value for message TTL, message TTL must be <= %d", MaxMessageTTLSeconds)}
	}
	return nil
}

// ValidatePersistence checks a persistence policy's quorums: ensemble >=
// write quorum >= ack quorum >= 1. Errors are HTTP 400.
func ValidatePersistence(v Persistence) error {
	if !(v.EnsembleSize >= v.WriteQuorum && v.WriteQuorum >= v.AckQuorum && v.AckQuorum >= 1) {
		return BadRequest(fmt.Errorf("persistence: need ensemble >= write quorum >= ack quorum >= 1, got %d/%d/%d", v.EnsembleSize, v.WriteQuorum, v.AckQuorum))
	}
	return nil
}
