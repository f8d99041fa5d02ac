package mledger

// tailCache holds the most recently appended entries, in append (position)
// order, up to max bytes, so readers that keep up with the writer never
// read bookies. Entries at or after the pin position (the open ledger's
// entries that bookies cannot serve yet: above the LAC they know) are never
// evicted, whatever the size. Not safe for concurrent use: the managed
// ledger holds its mutex.
type tailCache struct {
	max  int64 // -1: keep only pinned entries
	size int64
	q    []cacheEntry // append order; q[head:] live
	head int
	idx  map[Position][]byte
}

type cacheEntry struct {
	pos  Position
	data []byte
}

func (c *tailCache) len() int { return len(c.q) - c.head }

func (c *tailCache) put(p Position, data []byte) {
	if c.idx == nil {
		c.idx = map[Position][]byte{}
	}
	if _, ok := c.idx[p]; ok {
		return
	}
	c.q = append(c.q, cacheEntry{p, data})
	c.idx[p] = data
	c.size += int64(len(data))
}

func (c *tailCache) get(p Position) ([]byte, bool) {
	d, ok := c.idx[p]
	return d, ok
}

// evict drops the oldest entries while over capacity, stopping at pinFrom.
func (c *tailCache) evict(pinFrom Position) {
	limit := max(c.max, 0)
	for c.head < len(c.q) && c.size > limit && c.q[c.head].pos.Less(pinFrom) {
		c.pop()
	}
	c.compact()
}

// unpinAll is called when the open ledger closes: everything is readable
// from bookies now.
func (c *tailCache) unpinAll() { c.evict(Latest) }

// dropBefore drops every entry of ledgers before ledger id (trimmed).
func (c *tailCache) dropBefore(id int64) {
	for c.head < len(c.q) && c.q[c.head].pos.Ledger < id {
		c.pop()
	}
	c.compact()
}

func (c *tailCache) pop() {
	e := c.q[c.head]
	c.q[c.head] = cacheEntry{}
	c.head++
	delete(c.idx, e.pos)
	c.size -= int64(len(e.data))
}

func (c *tailCache) compact() {
	if c.head > 0 && c.head >= len(c.q)/2 {
		n := copy(c.q, c.q[c.head:])
		clear(c.q[n:])
		c.q = c.q[:n]
		c.head = 0
	}
}
