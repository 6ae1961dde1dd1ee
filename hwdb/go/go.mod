module homework/hwdb/go/hwdbclient

go 1.21
