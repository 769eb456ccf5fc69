module edgepop.local/upstream/crowdsec-bouncer

go 1.26.1

require (
	github.com/maxlerebourg/crowdsec-bouncer-traefik-plugin v1.6.0
	github.com/mitchellh/mapstructure v1.5.1-0.20231216201459-8508981c8b6c
)

require (
	github.com/leprosus/golang-ttl-map v1.1.7 // indirect
	github.com/maxlerebourg/simpleredis v1.0.12 // indirect
)
