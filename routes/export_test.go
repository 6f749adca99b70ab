package routes

// HashedKey is the bucket a hashed index keys value by.
func HashedKey(value string) string { return (&Index{hashed: true}).key(value) }
