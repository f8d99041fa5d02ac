package dispatch

import "hash/fnv"

// ringPoints is how many points each consumer has on the Key_Shared hash
// ring.
const ringPoints = 100

// keyOwner maps a key to a consumer by consistent hashing (ringPoints per
// consumer): the consumer with the first point at or after the key's hash,
// wrapping to the lowest point. Adding a consumer moves only the keys it
// takes.
func (c *Core) keyOwner(key string) *consumer {
	if len(c.consumers) == 0 {
		return nil
	}
	h := hash32(key)
	var best *consumer
	var bestPoint uint32
	var first *consumer
	var firstPoint uint32
	for _, cs := range c.consumers {
		for _, pt := range cs.ring {
			if first == nil || pt < firstPoint {
				first, firstPoint = cs, pt
			}
			if pt >= h && (best == nil || pt < bestPoint) {
				best, bestPoint = cs, pt
			}
		}
	}
	if best == nil {
		return first
	}
	return best
}

// KeyOwner returns the consumer that owns key on the hash ring under
// Key_Shared (ignoring draining hashes, readiness and permits), if any.
func (c *Core) KeyOwner(key string) (ID, bool) {
	if cs := c.keyOwner(key); cs != nil {
		return cs.ID, true
	}
	return 0, false
}

// hash32 is FNV-1a finished with a 64-bit mixer (splitmix64's), so short,
// similar keys and consumer names spread evenly over the ring.
func hash32(s string) uint32 {
	h := fnv.New64a()
	h.Write([]byte(s))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return uint32(x >> 32)
}
